"""The notifier's due deliveries through atfg_deliveries_due (atfgraph migration sqlite 0014, the
index keyed (status, next_at)): on a database written before, the pending deliveries are read
through that index in order, never by every pending delivery and a sort, and the ones due are
found as before. PostgreSQL already used its index (no migration there;
tests/unit/atfgraph/test_notify.py checks both dialects' plans)."""

from __future__ import annotations

import sqlite3
import time
from pathlib import Path

from upgrades import written_before

from atfgraph.server import _notify
from atfgraph.server._store import GraphStore

INSERT = (
    "INSERT INTO atfg_deliveries (id, wait_id, endpoint, status, attempts, next_at, created_at)"
    " VALUES (?, ?, 'http://127.0.0.1:9/hook', ?, ?, ?, ?)"
)


def _plan(path: Path) -> list[str]:
    conn = sqlite3.connect(path)
    try:
        return [str(r[-1]) for r in conn.execute("EXPLAIN QUERY PLAN " + _notify.SQL_DUE, (1.0, 10))]
    finally:
        conn.close()


def test_pending_deliveries_written_before_are_read_through_the_due_index(tmp_path: Path) -> None:
    db = tmp_path / "before.db"
    now = time.time()
    with written_before("sqlite", str(db), 14, lease_seconds=30) as old:

        def write(conn: sqlite3.Connection) -> None:
            for i in range(50):  # in back-off, due later, and a few already delivered
                conn.execute(INSERT, (f"d{i}", f"w{i}", "pending", 1, now + 60 + i, now))
            conn.execute(INSERT, ("due-2", "w-a", "pending", 2, now - 5, now))
            conn.execute(INSERT, ("due-1", "w-b", "pending", 1, now - 10, now))
            conn.execute(INSERT, ("sent", "w-c", "delivered", 1, now - 20, now))

        old.db.write_sync(write)
    assert "USE TEMP B-TREE FOR ORDER BY" in _plan(db)  # every pending one read and sorted
    GraphStore(str(db), lease_seconds=30).close()  # applies the migration
    plan = _plan(db)
    assert plan == ["SEARCH atfg_deliveries USING INDEX atfg_deliveries_due (status=? AND next_at<?)"], plan
    conn = sqlite3.connect(db)
    try:
        due = [r[0] for r in conn.execute(_notify.SQL_DUE, (now, 10))]
        assert due == ["due-1", "due-2"]  # the due ones, the earliest first
        assert conn.execute(_notify.SQL_NOTIFY_DUE, (now,)).fetchone() == (0, 1)
    finally:
        conn.close()
