"""Many finished runs, written straight into a server's database (SQLite file or PostgreSQL) for
the retention tests: 10,000 runs through the API would take minutes and test nothing more.

Each run gets the rows a real one has: events, a step, a checkpoint, a wait (a hook, so the
notification trigger writes its outbox row) with an extra token, and for the waits of approvals
a decision link, a delivery and an assignment (atfgraph's rows about a wait). Multi-row
inserts, 500 rows a statement, all of one call in one transaction."""

from __future__ import annotations

import sqlite3
from collections.abc import Sequence
from typing import Any

CHUNK = 500
STATUSES = ("completed", "failed", "cancelled")


class Db:
    """One connection to a SQLite file or a PostgreSQL database; ``?`` placeholders."""

    def __init__(self, location: str) -> None:
        self.postgres = location.startswith("postgresql://")
        if self.postgres:
            import psycopg

            self.conn: Any = psycopg.connect(location, autocommit=False)
        else:
            self.conn = sqlite3.connect(location, timeout=30)

    def execute(self, sql: str, params: Sequence[Any] = ()) -> Any:
        if self.postgres:
            sql = sql.replace("?", "%s")
        return self.conn.execute(sql, tuple(params))

    def scalar(self, sql: str, params: Sequence[Any] = ()) -> Any:
        return self.execute(sql, params).fetchone()[0]

    def insert(self, table: str, columns: Sequence[str], rows: Sequence[Sequence[Any]]) -> None:
        for i in range(0, len(rows), CHUNK):
            chunk = rows[i : i + CHUNK]
            marks = ", ".join(["(" + ", ".join("?" * len(columns)) + ")"] * len(chunk))
            flat = [value for row in chunk for value in row]
            self.execute(f"INSERT INTO {table} ({', '.join(columns)}) VALUES {marks}", flat)

    def close(self) -> None:
        self.conn.close()


def seed_runs(db: Db, prefix: str, count: int, *, finished_at: float | None, kind: str = "hook") -> list[str]:
    """``count`` runs named ``prefix-N`` with a full set of rows each. ``finished_at`` None: the
    runs are suspended (never purged); else each is completed, failed or cancelled then."""
    at = (finished_at or 1_000_000.0) - 100.0
    ids = [f"{prefix}-{i:05d}" for i in range(count)]
    runs, events, steps, waits, tokens, checkpoints = [], [], [], [], [], []
    links, deliveries, assignments = [], [], []
    for n, rid in enumerate(ids):
        status = "suspended" if finished_at is None else STATUSES[n % 3]
        runs.append((rid, "flows.review", status, b"{}", at, finished_at or at, finished_at))
        events += [(rid, 1, at, "run_created"), (rid, 2, at, "step_completed")]
        steps.append((rid, "s#1", "completed", 1, b"1", at))
        wid = f"w-{rid}"
        waits.append((wid, rid, "s#1/hook:ok#1", kind, "ok", "s#1", "received", at))
        tokens.append((f"t-{rid}".encode(), wid))
        checkpoints.append((rid, "", "state", b"{}", 1, at))
        if kind == "approval":
            links.append((f"l-{rid}", "page", wid, at, "owner", at + 3600))
            deliveries.append((f"d-{rid}", wid, "http://127.0.0.1:9/", "delivered", 1, at, at))
            assignments.append((wid, "[]", "[]"))
    db.insert("runs", ("id", "workflow", "status", "input", "created_at", "updated_at", "finished_at"), runs)
    db.insert("events", ("run_id", "seq", "at", "type"), events)
    db.insert("steps", ("run_id", "step_key", "status", "attempt", "result", "updated_at"), steps)
    db.insert(
        "waits", ("id", "run_id", "wait_key", "kind", "name", "step_key", "status", "created_at"), waits
    )
    db.insert("wait_tokens", ("token_digest", "wait_id"), tokens)
    db.insert("checkpoints", ("run_id", "scope", "name", "value", "revision", "updated_at"), checkpoints)
    if kind == "approval":
        db.insert(
            "atfg_wait_links", ("id", "kind", "wait_id", "created_at", "created_by", "expires_at"), links
        )
        db.insert(
            "atfg_deliveries",
            ("id", "wait_id", "endpoint", "status", "attempts", "next_at", "created_at"),
            deliveries,
        )
        db.insert("atfg_assignments", ("wait_id", "roles", "principals"), assignments)
    db.conn.commit()  # one transaction: a purger running meanwhile sees all of a run or none of it
    return ids


def seed_audit(db: Db, count: int, at: float) -> None:
    db.insert(
        "atfg_audit",
        ("at", "principal", "role", "action", "target", "outcome"),
        [(at, "owner", "owner", "traverser.submit", f"a-{i}", "allowed") for i in range(count)],
    )
    db.conn.commit()


#: Every table a purge touches, with how its rows name a run (for the oracle).
RUN_ROWS = {
    "events": "SELECT COUNT(*) FROM events WHERE run_id LIKE ?",
    "steps": "SELECT COUNT(*) FROM steps WHERE run_id LIKE ?",
    "waits": "SELECT COUNT(*) FROM waits WHERE run_id LIKE ?",
    "checkpoints": "SELECT COUNT(*) FROM checkpoints WHERE run_id LIKE ?",
    "runs": "SELECT COUNT(*) FROM runs WHERE id LIKE ?",
    "wait_tokens": "SELECT COUNT(*) FROM wait_tokens WHERE wait_id LIKE 'w-' || ?",
    "atfg_wait_links": "SELECT COUNT(*) FROM atfg_wait_links WHERE wait_id LIKE 'w-' || ?",
    "atfg_deliveries": "SELECT COUNT(*) FROM atfg_deliveries WHERE wait_id LIKE 'w-' || ?",
    "atfg_assignments": "SELECT COUNT(*) FROM atfg_assignments WHERE wait_id LIKE 'w-' || ?",
    "atfg_wait_events": "SELECT COUNT(*) FROM atfg_wait_events WHERE wait_id LIKE 'w-' || ?",
}


def rows_of(db: Db, prefix: str) -> dict[str, int]:
    """Rows left per table for the runs named ``prefix-*``."""
    return {table: int(db.scalar(sql, (f"{prefix}-%",))) for table, sql in RUN_ROWS.items()}
