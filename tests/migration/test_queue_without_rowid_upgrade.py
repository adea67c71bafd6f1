"""The queue as a WITHOUT ROWID table (pyworkflow's SQLite migration 0009; atfgraph's SQLite 0015
makes its queue_leases index again): a graph server's file written before it, with pyworkflow runs
queued (one due, one leased to a turn in flight, one sleeping) and a traverser queued for its node,
is migrated with every queue row as it was; the turn that held its lease before goes on with the
same fence, the due and sleeping runs are claimed when due, the traverser by its node's worker, and
every index on the queue is there, atfgraph's included."""

from __future__ import annotations

import sqlite3
from pathlib import Path

from upgrades import graph_store_before_pyworkflow

from atfgraph.server._store import GraphStore
from pyworkflow.store import RunStatus

NEW = 9  # pyworkflow's SQLite migration that rebuilds the queue
T0 = 1_700_000_000.0
INDEXES = {"queue_ready", "queue_local_leases", "queue_leases"}


def queue(db: str) -> tuple[str, set[str], list[tuple[object, ...]]]:
    conn = sqlite3.connect(db)
    try:
        (table,) = conn.execute(
            "SELECT sql FROM sqlite_master WHERE type = 'table' AND name = 'queue'"
        ).fetchone()
        indexes = {
            r[0]
            for r in conn.execute(
                "SELECT name FROM sqlite_master WHERE type = 'index' AND tbl_name = 'queue'"
            )
        }
        rows = conn.execute("SELECT * FROM queue ORDER BY run_id").fetchall()
    finally:
        conn.close()
    return str(table), indexes, rows


async def test_the_queue_written_before_the_migration_is_served_after_it(tmp_path: Path) -> None:
    db = str(tmp_path / "before.db")
    with graph_store_before_pyworkflow("sqlite", db, NEW, lease_seconds=30) as old:
        runs = old.pyworkflow
        await runs.create_run("due", "wf", b"{}", now=T0, lease_owner=None, lease_ttl=30)
        held = await runs.create_run("held", "wf", b"{}", now=T0, lease_owner="w-old", lease_ttl=3600)
        await runs.create_run("later", "wf", b"{}", now=T0 + 3600, lease_owner=None, lease_ttl=30)
        traverser, _ = await old.submit("n.skill", b"{}", max_attempts=1)
    assert held is not None
    table, indexes, rows = queue(db)
    assert "WITHOUT ROWID" not in table and len(rows) == 4
    assert indexes == {*INDEXES, "sqlite_autoindex_queue_1"}  # the rowid table's index of run_id

    store = GraphStore(db, lease_seconds=30)  # applies the rest
    try:
        table, indexes_after, rows_after = queue(db)
        assert table.endswith("WITHOUT ROWID") and indexes_after == INDEXES  # the key is the table
        assert rows_after == rows
        runs = store.pyworkflow
        await runs.complete_run(held.fence, b'"done"', now=T0 + 1)  # its fence from before holds
        done = await runs.get_run("held")
        assert done is not None and done.status == RunStatus.COMPLETED
        [claim] = await runs.claim("new", limit=10, now=T0 + 1, lease_ttl=30, max_crashes=3)
        assert claim.fence.run_id == "due"
        await runs.complete_run(claim.fence, b"1", now=T0 + 2)
        assert await runs.next_due() == T0 + 3600
        [later] = await runs.claim("new", limit=10, now=T0 + 3600, lease_ttl=30, max_crashes=3)
        assert later.fence.run_id == "later"
        worker = (await store.register_worker("n", "1.0", 1))["id"]
        [task] = await store.claim(worker, 1)
        assert task["traverser"]["id"] == traverser["id"]  # type: ignore[index]
    finally:
        store.close()
