"""Faults of the database under the group-commit writer, on SQLite: another process holding the
write lock (a write waits at most its write timeout, then ``DatabaseUnavailableError``, and
nothing of it is written), and the file deleted or replaced under the process (writes refuse).
PostgreSQL's lock timeout and a server that went away: tests/contract/test_postgres_faults.py."""

from __future__ import annotations

import asyncio
import contextlib
import os
import sqlite3
import time
from collections.abc import Iterator
from pathlib import Path

import psycopg
import pytest

from pyworkflow import CheckpointConflictError, DatabaseUnavailableError, LeaseLostError
from pyworkflow.store import Migration, SQLiteDatabase, SQLiteStore, database_failed
from pyworkflow.store._sqlite_db import LOCK_POLL_FIRST

SCHEMA = [Migration("test", 1, "t", "CREATE TABLE t (k TEXT NOT NULL UNIQUE);")]
#: The write timeout of these tests: short, so that each one takes well under a second.
TIMEOUT = 0.3


@pytest.fixture
def db(tmp_path: Path) -> Iterator[SQLiteDatabase]:
    database = SQLiteDatabase(tmp_path / "faults.db", migrations=SCHEMA, write_timeout=TIMEOUT)
    yield database
    database.close()


def keys(db: SQLiteDatabase) -> list[str]:
    return [r[0] for r in db.reader().execute("SELECT k FROM t ORDER BY rowid")]


def insert(k: str) -> object:
    return lambda conn: conn.execute("INSERT INTO t (k) VALUES (?)", (k,))


def exclusive(path: str | Path) -> sqlite3.Connection:
    """Another connection holding ``BEGIN EXCLUSIVE`` on the file (in WAL mode: its write lock)."""
    other = sqlite3.connect(path, isolation_level=None)
    other.execute("BEGIN EXCLUSIVE")
    return other


async def test_a_write_waits_at_most_its_timeout_for_a_lock_held_elsewhere(db: SQLiteDatabase) -> None:
    await db.write(insert("before"))
    other = exclusive(db.path)
    try:
        started = time.monotonic()
        outcomes = await asyncio.gather(
            *(db.write(insert(f"k{n}")) for n in range(20)), return_exceptions=True
        )
        waited = time.monotonic() - started
        # Every caller is answered within one bound (not one bound per caller run again alone).
        assert all(isinstance(o, DatabaseUnavailableError) for o in outcomes), outcomes
        assert "write timeout" in str(outcomes[0]) or "cannot take writes" in str(outcomes[0])
        assert waited < TIMEOUT * 2 + 1.0, waited
        with pytest.raises(DatabaseUnavailableError):
            await db.check_writable()
        assert keys(db) == ["before"]  # the reads still answer
    finally:
        other.execute("ROLLBACK")
        other.close()
    await db.write(insert("after"))
    await db.check_writable()
    assert keys(db) == ["before", "after"]  # nothing of the refused writes was written


async def test_a_write_queued_behind_a_blocked_batch_is_not_made_to_wait_twice(db: SQLiteDatabase) -> None:
    other = exclusive(db.path)
    try:
        first = asyncio.ensure_future(db.write(insert("a")))
        await asyncio.sleep(TIMEOUT / 2)  # the writer is waiting on the lock with "a"
        started = time.monotonic()
        with pytest.raises(DatabaseUnavailableError):
            await db.write(insert("b"))
        # "b" waited in the queue for the rest of "a"'s bound, then at most the rest of its own.
        assert time.monotonic() - started < TIMEOUT + 0.5
        with pytest.raises(DatabaseUnavailableError):
            await first
    finally:
        other.execute("ROLLBACK")
        other.close()


async def test_a_lock_released_within_the_bound_is_taken_by_trying_again(db: SQLiteDatabase) -> None:
    """Another process's write lock, released within the write timeout: the writer (whose
    connection has no busy handler of SQLite's, which sleeps up to 100 ms a try) tries again
    after short sleeps, not in a busy loop, and its batch goes through once the lock is free.
    The lock is released once the writer has tried 20 times."""
    readers_bound = db.reader().execute("PRAGMA busy_timeout").fetchone()[0]
    assert readers_bound == int(TIMEOUT * 1000)  # readers keep SQLite's own wait
    assert await db.write(lambda c: c.execute("PRAGMA busy_timeout").fetchone()[0]) == 0
    loop = asyncio.get_running_loop()
    other = exclusive(db.path)
    other.execute("INSERT INTO t (k) VALUES ('other')")
    tries: list[float] = []
    begin = db._begin_now

    def counted(conn: sqlite3.Connection) -> None:  # on the writer's thread
        tries.append(time.monotonic())
        if len(tries) == 20:
            loop.call_soon_threadsafe(lambda: (other.execute("COMMIT"), other.close()))
        begin(conn)

    db._begin_now = counted  # type: ignore[method-assign]
    try:
        await asyncio.gather(*(db.write(insert(f"k{n}")) for n in range(5)))
    finally:
        with contextlib.suppress(sqlite3.ProgrammingError):
            other.close()
    assert keys(db) == ["other", "k0", "k1", "k2", "k3", "k4"]  # the other's commit came first
    assert len(tries) >= 21, len(tries)  # 20 refused, then the one that began
    # Each try after a sleep of at least 0.1 ms (LOCK_POLL_FIRST, doubling to 1 ms).
    assert tries[19] - tries[0] >= 19 * LOCK_POLL_FIRST, tries[19] - tries[0]


async def test_a_statement_alone_waits_for_the_lock_as_a_batch_does(db: SQLiteDatabase) -> None:
    """A statement alone (``submit`` with no key) runs in autocommit, outside ``BEGIN``: it too
    tries again while another process holds the lock (with no busy handler it would be refused
    at once), and goes through once the lock is free."""
    other = exclusive(db.path)
    loop = asyncio.get_running_loop()
    release = loop.call_later(TIMEOUT / 6, lambda: (other.execute("COMMIT"), other.close()))
    try:
        assert await db.submit("INSERT INTO t (k) VALUES ('alone') RETURNING k", (), None) == [("alone",)]
    finally:
        release.cancel()
        with contextlib.suppress(sqlite3.ProgrammingError):
            other.close()
    assert keys(db) == ["alone"]


def test_the_blocking_form_is_bounded_too(db: SQLiteDatabase) -> None:
    other = exclusive(db.path)
    try:
        started = time.monotonic()
        with pytest.raises(DatabaseUnavailableError):
            db.write_sync(insert("x"))
        assert time.monotonic() - started < TIMEOUT + 1.0
    finally:
        other.execute("ROLLBACK")
        other.close()


async def test_pyworkflows_store_refuses_a_write_it_cannot_commit(tmp_path: Path) -> None:
    store = SQLiteStore(str(tmp_path / "wf.db"), write_timeout=TIMEOUT)
    try:
        other = exclusive(tmp_path / "wf.db")
        try:
            started = time.monotonic()
            with pytest.raises(DatabaseUnavailableError):
                await store.create_run(
                    "run-1", "wf", b"{}", now=time.time(), lease_owner=None, lease_ttl=30.0
                )
            assert time.monotonic() - started < TIMEOUT + 1.0
        finally:
            other.execute("ROLLBACK")
            other.close()
        assert await store.get_run("run-1") is None
    finally:
        store.close()


@pytest.mark.parametrize("what", ["deleted", "replaced"])
async def test_a_file_deleted_or_replaced_under_the_process_takes_no_writes(
    db: SQLiteDatabase, tmp_path: Path, what: str
) -> None:
    await db.write(insert("kept"))
    path = Path(db.path)
    if what == "deleted":
        for suffix in ("", "-wal", "-shm"):
            Path(f"{path}{suffix}").unlink(missing_ok=True)
    else:
        fresh = tmp_path / "fresh.db"
        sqlite3.connect(fresh).close()
        os.replace(fresh, path)
    with pytest.raises(DatabaseUnavailableError, match=what):
        await db.write(insert("lost"))
    with pytest.raises(DatabaseUnavailableError, match=what):
        await db.check_writable()
    with pytest.raises(DatabaseUnavailableError, match=what):
        db.check_file()


async def test_a_deleted_write_ahead_log_is_noticed(db: SQLiteDatabase) -> None:
    await db.write(insert("kept"))
    db.check_file()  # records the WAL it writes
    Path(f"{db.path}-wal").unlink()
    with pytest.raises(DatabaseUnavailableError, match="write-ahead log"):
        await db.write(insert("lost"))


def test_a_write_timeout_must_be_positive(tmp_path: Path) -> None:
    with pytest.raises(ValueError, match="write_timeout"):
        SQLiteDatabase(tmp_path / "x.db", write_timeout=0)


def test_what_counts_as_the_database_failing_under_a_call() -> None:
    """``database_failed``: the errors after which a turn stops and its run is taken again (the
    database's), and the refusals and bugs that stay the step's or the workflow's."""
    assert database_failed(DatabaseUnavailableError("locked"))
    assert database_failed(sqlite3.OperationalError("disk I/O error"))
    assert database_failed(psycopg.OperationalError("connection refused"))
    assert database_failed(psycopg.errors.AdminShutdown("terminating connection"))
    assert not database_failed(LeaseLostError("another owner"))
    assert not database_failed(CheckpointConflictError("stale revision"))
    assert not database_failed(sqlite3.IntegrityError("UNIQUE constraint failed"))
    assert not database_failed(psycopg.errors.UniqueViolation("duplicate key"))
    assert not database_failed(psycopg.errors.ProgramLimitExceeded("index row requires 18016 bytes"))
    assert not database_failed(ValueError("a bug"))


def test_a_statement_sqlite_cannot_run_is_not_the_database_failing(tmp_path: Path) -> None:
    """SQLite raises a missing table (a schema bug) and a held lock alike as ``OperationalError``;
    only the lock is the database failing under the call (a turn that met the bug would meet it
    again at every retry, and its run would be failed as crashed instead of with the error)."""
    path = tmp_path / "codes.db"
    holder = sqlite3.connect(path, isolation_level=None)
    other = sqlite3.connect(path, isolation_level=None, timeout=0)
    try:
        holder.execute("CREATE TABLE t (x)")
        with pytest.raises(sqlite3.OperationalError, match="no such table") as missing:
            other.execute("SELECT * FROM no_such_table")
        assert not database_failed(missing.value)
        holder.execute("BEGIN IMMEDIATE")
        with pytest.raises(sqlite3.OperationalError, match="locked") as locked:
            other.execute("BEGIN IMMEDIATE")
        assert database_failed(locked.value)
    finally:
        holder.close()
        other.close()
