"""Looking at a benchmark's store from outside the engine: counts and sizes come from a separate
connection, never from the engine's memory. Shared by ``bench.hitl`` and ``bench.parked``."""

from __future__ import annotations

import argparse
import contextlib
import json
import os
import sqlite3
import time
from collections.abc import Callable, Iterator, Sequence
from pathlib import Path
from typing import Any, Protocol
from urllib.parse import urlsplit, urlunsplit

from pyworkflow.store import sqlite_url

#: The PostgreSQL server a benchmark makes its databases on, unless ``--url`` names another.
DEFAULT_PG_SERVER = os.environ.get("PYWORKFLOW_TEST_PG", "postgresql://postgres@127.0.0.1:5432/postgres")


def add_store_arguments(parser: argparse.ArgumentParser) -> None:
    """``--store sqlite|postgresql`` and ``--url``, the PostgreSQL server (a role that may create
    databases: the benchmark makes its own and drops it after)."""
    parser.add_argument("--store", choices=("sqlite", "postgresql"), default="sqlite")
    parser.add_argument(
        "--url",
        default=DEFAULT_PG_SERVER,
        help="--store postgresql: the server (a role that may create databases)",
    )


# -- looking at the store from outside the engine -------------------------------------------------


class Observer(Protocol):
    """A separate connection to the store: counts and sizes come from here, never from memory."""

    def count(self, workflow: str, status: str) -> int: ...
    def count_status(self, status: str) -> int: ...
    def results(self, workflow: str) -> list[Any]: ...
    def size_bytes(self) -> int: ...
    def clone_suspended(self, run_ids: Sequence[str], copies: int) -> float: ...
    def pad_events(self, run_id: str, total: int) -> int: ...
    def close(self) -> None: ...


class SQLiteObserver:
    def __init__(self, path: str) -> None:
        self.path = path
        self.conn = sqlite3.connect(path, isolation_level=None, timeout=60)
        self.conn.execute("PRAGMA busy_timeout = 60000")

    def count(self, workflow: str, status: str) -> int:
        sql = "SELECT COUNT(*) FROM runs WHERE status = ? AND workflow = ?"
        return int(self.conn.execute(sql, (status, workflow)).fetchone()[0])

    def count_status(self, status: str) -> int:
        """Cheap enough to poll: answered from the (status, created_at) index alone."""
        return int(self.conn.execute("SELECT COUNT(*) FROM runs WHERE status = ?", (status,)).fetchone()[0])

    def results(self, workflow: str) -> list[Any]:
        sql = "SELECT result FROM runs WHERE workflow = ? AND status = 'completed'"
        return [json.loads(r[0]) for r in self.conn.execute(sql, (workflow,))]

    def size_bytes(self) -> int:
        """Database file plus WAL, after a checkpoint that moves the WAL into the file (retried while
        the engine's writer is busy)."""
        for _ in range(100):
            busy, _, _ = self.conn.execute("PRAGMA wal_checkpoint(TRUNCATE)").fetchone()
            if not busy:
                break
            time.sleep(0.02)
        wal = Path(self.path + "-wal")
        return os.path.getsize(self.path) + (wal.stat().st_size if wal.exists() else 0)

    def clone_suspended(self, run_ids: Sequence[str], copies: int) -> float:
        """Copy every row of the given (suspended) runs ``copies`` times under new ids, with fresh
        token digests, in one transaction of this separate connection. Returns seconds taken."""
        started = time.perf_counter()
        c = self.conn
        c.execute("CREATE TEMP TABLE IF NOT EXISTS bench_src (id TEXT PRIMARY KEY)")
        c.execute("CREATE TEMP TABLE IF NOT EXISTS bench_k (n INTEGER PRIMARY KEY)")
        c.execute("BEGIN IMMEDIATE")
        try:
            c.execute("DELETE FROM bench_src")
            c.execute("DELETE FROM bench_k")
            c.executemany("INSERT INTO bench_src (id) VALUES (?)", [(r,) for r in run_ids])
            base = int(c.execute("SELECT COUNT(*) FROM runs WHERE id LIKE '%~c%'").fetchone()[0])
            c.executemany("INSERT INTO bench_k (n) VALUES (?)", [(base + k,) for k in range(copies)])
            sfx = "'~c' || k.n"
            c.execute(f"""INSERT INTO runs (id, workflow, status, input, result, error, created_at,
                updated_at, finished_at) SELECT r.id || {sfx}, r.workflow, r.status, r.input, r.result,
                r.error, r.created_at, r.updated_at, r.finished_at
                FROM runs r JOIN bench_src s ON s.id = r.id CROSS JOIN bench_k k""")
            c.execute(f"""INSERT INTO events (run_id, seq, at, type, key, data)
                SELECT e.run_id || {sfx}, e.seq, e.at, e.type, e.key, e.data
                FROM events e JOIN bench_src s ON s.id = e.run_id CROSS JOIN bench_k k""")
            c.execute(f"""INSERT INTO steps (run_id, step_key, status, attempt, result, error, delivered,
                updated_at) SELECT t.run_id || {sfx}, t.step_key, t.status, t.attempt, t.result, t.error,
                t.delivered, t.updated_at
                FROM steps t JOIN bench_src s ON s.id = t.run_id CROSS JOIN bench_k k""")
            c.execute(f"""INSERT INTO waits (id, run_id, wait_key, kind, name, step_key, token_digest, status,
                notified, created_at, expires_at, resolved_at, payload, payload_schema)
                SELECT w.id || {sfx}, w.run_id || {sfx}, w.wait_key, w.kind, w.name, w.step_key,
                randomblob(32), w.status, w.notified, w.created_at, w.expires_at, w.resolved_at, w.payload,
                w.payload_schema FROM waits w JOIN bench_src s ON s.id = w.run_id CROSS JOIN bench_k k""")
            c.execute(f"""INSERT INTO checkpoints (run_id, scope, name, value, revision, updated_at)
                SELECT p.run_id || {sfx}, p.scope, p.name, p.value, p.revision, p.updated_at
                FROM checkpoints p JOIN bench_src s ON s.id = p.run_id CROSS JOIN bench_k k""")
            c.execute("COMMIT")
        except BaseException:
            c.execute("ROLLBACK")
            raise
        return time.perf_counter() - started

    def pad_events(self, run_id: str, total: int) -> int:
        """Append filler history (``checkpoint_saved`` events of the suspended step, as if it had
        saved its checkpoint many times) until the run has ``total`` events. Returns the count."""
        c = self.conn
        c.execute("BEGIN IMMEDIATE")
        try:
            last = int(
                c.execute("SELECT COALESCE(MAX(seq), 0) FROM events WHERE run_id = ?", (run_id,)).fetchone()[
                    0
                ]
            )
            at = time.time()
            rows = [
                (run_id, last + k, at, "checkpoint_saved", "review#1", None)
                for k in range(1, total - last + 1)
            ]
            c.executemany(
                "INSERT INTO events (run_id, seq, at, type, key, data) VALUES (?, ?, ?, ?, ?, ?)", rows
            )
            c.execute("COMMIT")
        except BaseException:
            c.execute("ROLLBACK")
            raise
        return int(c.execute("SELECT COUNT(*) FROM events WHERE run_id = ?", (run_id,)).fetchone()[0])

    def close(self) -> None:
        self.conn.close()


class PostgresObserver:
    """The same observations on PostgreSQL (for the second backend; its schema mirrors SQLite's)."""

    def __init__(self, url: str) -> None:
        import psycopg

        self.conn = psycopg.connect(url, autocommit=True)

    def count(self, workflow: str, status: str) -> int:
        sql = "SELECT COUNT(*) FROM runs WHERE status = %s AND workflow = %s"
        row = self.conn.execute(sql, (status, workflow)).fetchone()
        return int(row[0]) if row else 0

    def count_status(self, status: str) -> int:
        row = self.conn.execute("SELECT COUNT(*) FROM runs WHERE status = %s", (status,)).fetchone()
        return int(row[0]) if row else 0

    def results(self, workflow: str) -> list[Any]:
        sql = "SELECT result FROM runs WHERE workflow = %s AND status = 'completed'"
        return [json.loads(bytes(r[0])) for r in self.conn.execute(sql, (workflow,))]

    def size_bytes(self) -> int:
        sql = """SELECT COALESCE(SUM(pg_total_relation_size(c.oid)), 0) FROM pg_class c
                 JOIN pg_namespace n ON n.oid = c.relnamespace
                 WHERE n.nspname = current_schema() AND c.relkind = 'r'"""
        row = self.conn.execute(sql).fetchone()
        return int(row[0]) if row else 0

    def clone_suspended(self, run_ids: Sequence[str], copies: int) -> float:
        raise NotImplementedError("cloning history is implemented for SQLite only; use --skip-flat")

    def pad_events(self, run_id: str, total: int) -> int:
        raise NotImplementedError("padding history is implemented for SQLite only; use --skip-flat")

    def close(self) -> None:
        self.conn.close()


#: Where the benchmarks write their figures by default (``--out`` elsewhere).
RESULTS_DIR = Path(__file__).resolve().parent / "results"


def save_and_report(out: Path, result: dict[str, Any], report: Callable[[dict[str, Any]], None]) -> int:
    """Writes a benchmark's ``result`` (with ``out`` in it) as JSON to ``out``, its folder made if
    need be, then prints it with ``report``; the exit status."""
    result["out"] = str(out)
    out.parent.mkdir(parents=True, exist_ok=True)
    out.write_text(json.dumps(result, indent=2) + "\n")
    report(result)
    return 0


def storage_url(store: str, path: Path, url: str | None) -> str:
    if store == "sqlite":
        return sqlite_url(path)
    if not url:
        raise SystemExit("--store postgresql needs --url postgresql://... (or $PYWORKFLOW_TEST_PG)")
    return url


@contextlib.contextmanager
def fresh_database(store: str, admin_url: str | None, label: str) -> Iterator[str | None]:
    """For PostgreSQL, a new empty database (created through ``admin_url``, dropped afterwards);
    for SQLite nothing (every phase uses a new file)."""
    if store == "sqlite":
        yield None
        return
    if not admin_url:
        raise SystemExit("--store postgresql needs --url postgresql://... (or $PYWORKFLOW_TEST_PG)")
    import psycopg

    name = f"pwbench_{label}_{os.getpid()}_{int(time.time())}"
    parts = urlsplit(admin_url)
    with psycopg.connect(admin_url, autocommit=True) as conn:
        conn.execute(f'CREATE DATABASE "{name}"')
    try:
        yield urlunsplit((parts.scheme, parts.netloc, f"/{name}", parts.query, parts.fragment))
    finally:
        with psycopg.connect(admin_url, autocommit=True) as conn:
            conn.execute(f'DROP DATABASE IF EXISTS "{name}" WITH (FORCE)')


def make_observer(store: str, path: Path, url: str | None) -> Observer:
    if store == "sqlite":
        return SQLiteObserver(str(path))
    assert url is not None
    return PostgresObserver(url)
