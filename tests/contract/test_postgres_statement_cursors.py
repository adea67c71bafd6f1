"""PostgreSQL only: a writer's statement groups reuse its connection's cursors from group to group
(a cursor made per statement cost about half of the writer's CPU). Each caller still gets its own
statement's rows, never another group's or an earlier statement's; a kept cursor holds no copy
of its rows; a group that failed starts the next one on new cursors; a group larger than the
cursors kept gets more for that group only."""

from __future__ import annotations

import asyncio
from collections.abc import Iterator
from typing import Any

import pytest

from pyworkflow.store import Migration, PostgresDatabase, _pg_db

pytestmark = pytest.mark.postgres

SCHEMA = [Migration("test", 1, "t", "CREATE TABLE t (k text PRIMARY KEY, v bytea);")]


@pytest.fixture
def db(pg_database: str) -> Iterator[PostgresDatabase]:
    """One writer thread, no inline statements: what is submitted while it sleeps is one group."""
    database = PostgresDatabase(pg_database, migrations=SCHEMA)
    try:
        yield database
    finally:
        database.close()


def _kept(db: PostgresDatabase) -> list[Any]:
    conn = db._slots[0].conn
    assert conn is not None
    return list(conn._cursors)


async def _group(db: PostgresDatabase, statements: list[tuple[str, tuple[Any, ...], str]]) -> list[Any]:
    """Submit ``statements`` while the writer sleeps, so that they are sent as one group (a lone
    statement is sent alone, on the first kept cursor); each caller's outcome (its rows, or its
    error)."""
    asleep = db.submit("SELECT pg_sleep(0.2)", None, None)  # alone, in a transaction of its own
    for _ in range(200):
        await asyncio.sleep(0.005)
        if not db._queue:
            break
    groups = db.groups
    futures = [db.submit(sql, params, key) for sql, params, key in statements]
    await asleep
    outcomes = await asyncio.gather(*futures, return_exceptions=True)
    assert db.groups == groups + (len(statements) > 1)  # they did form one group (one alone: none)
    return outcomes


async def test_groups_reuse_the_writers_cursors_and_each_caller_gets_its_own_rows(
    db: PostgresDatabase,
) -> None:
    first = await _group(
        db, [("INSERT INTO t (k, v) VALUES (?, ?) RETURNING k", (f"a{i}", b"x"), f"a{i}") for i in range(40)]
    )
    assert first == [[(f"a{i}",)] for i in range(40)]
    kept = _kept(db)
    assert len(kept) == 42  # BEGIN, the 40 statements, COMMIT

    # The next group (other statements, fewer rows each, some none) runs on the same cursors.
    second = await _group(
        db,
        [("SELECT k FROM t WHERE k = ?", (f"a{i}",), "") for i in range(0, 40, 2)]
        + [("SELECT k FROM t WHERE k = ?", ("none",), "")]
        + [("UPDATE t SET v = ? WHERE k = ?", (b"y", f"a{i}"), f"a{i}") for i in range(1, 39, 2)],
    )
    assert second == [[(f"a{i}",)] for i in range(0, 40, 2)] + [[]] + [[]] * 19
    assert [id(c) for c in _kept(db)] == [id(c) for c in kept]


async def test_a_kept_cursor_keeps_no_copy_of_its_rows(db: PostgresDatabase) -> None:
    big = b"z" * 1_000_000
    assert await _group(db, [("INSERT INTO t (k, v) VALUES (?, ?) RETURNING v", ("big", big), "big")]) == [
        [(big,)]
    ]
    # (a group sends its reads first: this one reads what the group before wrote)
    outcomes = await _group(
        db, [("SELECT v FROM t WHERE k = ?", ("big",), ""), ("SELECT length(v) FROM t", (), "")]
    )
    assert outcomes == [[(big,)], [(1_000_000,)]]
    results = [cur.pgresult for cur in _kept(db)]
    # BEGIN and COMMIT hold their (empty) results; every statement's result was cleared once read
    assert [res.ntuples for res in results[1:-1]] == [0, 0]
    assert all(res.status == _pg_db.pq.ExecStatus.FATAL_ERROR for res in results[1:-1])  # libpq's cleared


async def test_a_failed_group_leaves_no_earlier_rows_to_the_next(db: PostgresDatabase) -> None:
    assert await _group(db, [("SELECT ?::text", (f"old{i}",), "") for i in range(6)]) == [
        [(f"old{i}",)] for i in range(6)
    ]
    before = _kept(db)
    outcomes = await _group(
        db,
        [("SELECT ?::text", (f"new{i}",), "") for i in range(3)]
        + [("SELECT 1 / 0", (), "")]
        + [("SELECT ?::text", (f"new{i}",), "") for i in range(3, 5)],
    )
    # The group was rolled back and each statement sent again alone: its own rows or its own error.
    assert outcomes[:3] == [[("new0",)], [("new1",)], [("new2",)]]
    assert isinstance(outcomes[3], _pg_db.pg_errors.DivisionByZero)
    assert outcomes[4:] == [[("new3",)], [("new4",)]]
    after = _kept(db)
    assert not {id(c) for c in before} & {id(c) for c in after}  # new cursors since the failure
    assert await _group(db, [("SELECT ?::text", (f"next{i}",), "") for i in range(8)]) == [
        [(f"next{i}",)] for i in range(8)
    ]


async def test_a_group_larger_than_the_cursors_kept_gets_more_for_itself(
    db: PostgresDatabase, monkeypatch: pytest.MonkeyPatch
) -> None:
    monkeypatch.setattr(_pg_db, "KEPT_CURSORS", 4)
    outcomes = await _group(db, [("SELECT ?::int * 2", (i,), "") for i in range(10)])
    assert outcomes == [[(i * 2,)] for i in range(10)]
    assert len(_kept(db)) == 4
    assert await _group(db, [("SELECT ?::int + 1", (i,), "") for i in range(3)]) == [
        [(i + 1,)] for i in range(3)
    ]
