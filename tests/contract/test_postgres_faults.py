"""PostgreSQL only: the bounded write wait. A row lock another connection holds makes a write fail
after the lock timeout (the write timeout) with an error the graph server answers as
``503 database_unavailable``, not a 500; writes queued behind it fail at their deadline without
running; nothing of either is written. (SQLite: tests/unit/test_database_faults.py.)"""

from __future__ import annotations

import asyncio
import os
import time
from collections.abc import Iterator

import psycopg
import pytest

from atfgraph.server._errors import database_refused, database_unavailable
from pyworkflow import DatabaseUnavailableError
from pyworkflow.store import Migration, PostgresDatabase, database_failed, over_a_database_limit

pytestmark = pytest.mark.postgres
SCHEMA = [Migration("test", 1, "t", "CREATE TABLE t (k TEXT PRIMARY KEY, n INTEGER NOT NULL);")]
TIMEOUT = 0.4


@pytest.fixture
def db(pg_database: str) -> Iterator[PostgresDatabase]:
    database = PostgresDatabase(
        pg_database, migrations=SCHEMA, write_timeout=TIMEOUT, lock_timeout_ms=int(TIMEOUT * 1000)
    )
    yield database
    database.close()


def bump(conn: object) -> None:
    conn.execute("UPDATE t SET n = n + 1 WHERE k = 'a'")  # type: ignore[attr-defined]


def value(url: str) -> int:
    with psycopg.connect(url) as conn:
        row = conn.execute("SELECT n FROM t WHERE k = 'a'").fetchone()
    assert row is not None
    return int(row[0])


async def test_a_row_lock_held_elsewhere_is_unavailable_after_the_timeout(
    pg_database: str, db: PostgresDatabase
) -> None:
    await db.write(lambda conn: conn.execute("INSERT INTO t VALUES ('a', 0)"))
    with psycopg.connect(pg_database) as other:  # a transaction holding the row until rollback
        other.execute("SELECT n FROM t WHERE k = 'a' FOR UPDATE")
        started = time.monotonic()
        outcomes = await asyncio.gather(*(db.write(bump) for _ in range(5)), return_exceptions=True)
        waited = time.monotonic() - started
        assert all(isinstance(o, Exception) for o in outcomes), outcomes
        for outcome in outcomes:
            assert isinstance(outcome, BaseException)
            down = database_unavailable(outcome)
            assert down is not None and (down.status, down.code) == (503, "database_unavailable"), outcome
        kinds = (psycopg.errors.LockNotAvailable, DatabaseUnavailableError)
        assert all(isinstance(o, kinds) for o in outcomes), outcomes
        started = time.monotonic()
        with pytest.raises(psycopg.errors.LockNotAvailable):  # alone: the lock timeout itself
            await db.write(bump)
        waited = max(waited, time.monotonic() - started)
        # Each job waited for its own deadline at most, not one lock timeout after another.
        assert waited < TIMEOUT * 2 + 1.5, waited
        other.rollback()
    assert value(pg_database) == 0  # nothing of the refused writes was written
    await db.write(bump)
    await db.check_writable()
    assert value(pg_database) == 1


async def test_a_write_that_waited_past_its_deadline_does_not_run(
    pg_database: str, db: PostgresDatabase
) -> None:
    await db.write(lambda conn: conn.execute("INSERT INTO t VALUES ('a', 0)"))
    # The writer is busy past the next job's deadline: that job fails without running.
    busy = asyncio.ensure_future(db.write(lambda conn: conn.execute("SELECT pg_sleep(0.2)"), timeout=5))
    await asyncio.sleep(0.05)
    with pytest.raises(DatabaseUnavailableError, match="write timeout"):
        await db.write(bump, timeout=0.1)
    await busy
    assert value(pg_database) == 0


async def test_a_value_over_a_limit_is_refused_not_the_database_failing(
    pg_database: str, db: PostgresDatabase
) -> None:
    """PostgreSQL's class 54 (here an index entry too large) comes as an ``OperationalError``, but
    the same statement would meet it again: not the database failing (no retry as a crash, no
    503), a refusal of what was sent (the graph server's 422); nothing is written, and the
    database takes the next write."""
    too_long = os.urandom(8_000).hex()  # incompressible: over a B-tree entry's 2,704 bytes
    with pytest.raises(psycopg.OperationalError) as refused:
        await db.write(lambda conn: conn.execute("INSERT INTO t VALUES (?, 0)", (too_long,)))
    exc = refused.value
    assert exc.sqlstate == "54000", exc.sqlstate
    assert over_a_database_limit(exc) and not database_failed(exc)
    assert database_unavailable(exc) is None
    answer = database_refused(exc)
    assert answer is not None and answer.status == 422 and answer.code == "validation_error"
    await db.write(lambda conn: conn.execute("INSERT INTO t VALUES ('b', 1)"))
    with psycopg.connect(pg_database) as conn:
        assert conn.execute("SELECT k FROM t ORDER BY k").fetchall() == [("b",)]
    # The database failing is not a limit: a connection the server ended.
    with psycopg.connect(pg_database, autocommit=True) as conn:
        pid = conn.info.backend_pid
        with psycopg.connect(pg_database, autocommit=True) as killer:
            killer.execute("SELECT pg_terminate_backend(%s)", (pid,))
        with pytest.raises(psycopg.OperationalError) as lost:
            conn.execute("SELECT 1")
    assert database_failed(lost.value) and not over_a_database_limit(lost.value)
