"""Waves on SQLite: the writes that many callers on one event loop make in one pass of the loop are
committed together on the loop itself (``GroupCommitWriter._flush_wave``), not handed to the writer
thread and back; the writer thread still takes them when it has the connection past a short wait,
when another process holds the write lock, or when the database closes first. (The writer thread's
own batches and inline writes: tests/unit/test_group_commit.py.)"""

from __future__ import annotations

import asyncio
import sqlite3
import threading
from collections.abc import Callable, Iterator
from pathlib import Path

import pytest

from pyworkflow.store import Migration, SQLiteDatabase, _group_commit, _inline

SCHEMA = [Migration("test", 1, "t", "CREATE TABLE t (k TEXT NOT NULL UNIQUE);")]


@pytest.fixture
def db(tmp_path: Path) -> Iterator[SQLiteDatabase]:
    database = SQLiteDatabase(tmp_path / "waves.db", migrations=SCHEMA)
    yield database
    database.close()


def keys(db: SQLiteDatabase) -> list[str]:
    return [r[0] for r in db.reader().execute("SELECT k FROM t ORDER BY rowid")]


def insert(k: str, where: list[int] | None = None) -> Callable[[sqlite3.Connection], str]:
    """A write function that inserts ``k`` (refused if ``k`` is ``"bad"``) and notes its thread."""

    def fn(conn: sqlite3.Connection) -> str:
        if where is not None:
            where.append(threading.get_ident())
        if k == "bad":
            raise ValueError("refused")
        conn.execute("INSERT INTO t (k) VALUES (?)", (k,))
        return k

    return fn


async def test_concurrent_writes_on_one_loop_commit_as_waves_on_the_loop(db: SQLiteDatabase) -> None:
    where: list[int] = []
    commits, waves = db.commits, db.wave_commits
    n = 2 * _group_commit.MAX_GROUP + 100
    values = await asyncio.gather(*(db.write(insert(f"k{i}", where)) for i in range(n)))
    assert values == [f"k{i}" for i in range(n)]  # each caller its own value
    assert sorted(keys(db)) == sorted(values)
    assert set(where) == {threading.get_ident()}  # every one on the loop's thread
    # One wave, in transactions of at most MAX_GROUP jobs: three commits, none by the thread.
    assert db.wave_commits - waves == 3
    assert db.commits - commits == 3


async def test_a_failing_function_in_a_wave_is_only_its_callers_error(db: SQLiteDatabase) -> None:
    where: list[int] = []
    outcomes = await asyncio.gather(
        *(db.write(insert(k, where)) for k in ("a", "b", "bad", "c", "d")), return_exceptions=True
    )
    assert outcomes[:2] == ["a", "b"] and outcomes[3:] == ["c", "d"]
    assert isinstance(outcomes[2], ValueError)
    assert sorted(keys(db)) == ["a", "b", "c", "d"]
    assert set(where) == {threading.get_ident()}


async def test_deferred_writes_join_an_open_wave_in_order(
    db: SQLiteDatabase, monkeypatch: pytest.MonkeyPatch
) -> None:
    """A write nobody waits for, made on the loop while a wave is open, joins that wave after the
    writes already in it and before any later one: one commit for all."""
    monkeypatch.setattr(_group_commit, "DEFER_LINGER", 60.0)  # the writer thread never takes it
    outcomes: list[BaseException | None] = []
    commits, waves = db.commits, db.wave_commits

    async def defer_then_write() -> None:
        db.write_deferred(insert("deferred"), outcomes.append)
        await db.write(insert("after"))

    await asyncio.gather(
        *(db.write(insert(f"before{i}")) for i in range(4)),
        defer_then_write(),
        *(db.write(insert(f"later{i}")) for i in range(2)),
    )
    assert keys(db) == ["before0", "before1", "before2", "before3", "deferred", "after", "later0", "later1"]
    assert outcomes == [None]
    assert (db.commits - commits, db.wave_commits - waves) == (1, 1)


async def hold_writer(db: SQLiteDatabase) -> tuple[threading.Event, asyncio.Future[None]]:
    """Keep the writer thread busy (a write from another thread) until the event is set."""
    release, started = threading.Event(), threading.Event()

    def busy(conn: sqlite3.Connection) -> None:
        started.set()
        release.wait(10)

    held = asyncio.ensure_future(asyncio.to_thread(db.write_sync, busy))
    await asyncio.to_thread(started.wait, 10)
    return release, held


async def test_a_wave_waits_a_little_for_the_busy_writer_then_commits_on_the_loop(db: SQLiteDatabase) -> None:
    release, held = await hold_writer(db)
    where: list[int] = []
    waves = db.wave_commits
    writes = asyncio.ensure_future(asyncio.gather(*(db.write(insert(f"k{i}", where)) for i in range(5))))
    await asyncio.sleep(0.01)  # well within WAVE_PATIENCE: the wave is still waiting
    assert not writes.done() and where == []
    release.set()
    await held
    assert await asyncio.wait_for(writes, 10) == [f"k{i}" for i in range(5)]
    assert set(where) == {threading.get_ident()} and db.wave_commits - waves == 1


async def test_a_wave_hands_its_jobs_to_a_writer_busy_past_its_patience(
    db: SQLiteDatabase, monkeypatch: pytest.MonkeyPatch
) -> None:
    monkeypatch.setattr(_inline, "WAVE_PATIENCE", 0.02)
    release, held = await hold_writer(db)
    where: list[int] = []
    waves = db.wave_commits
    writes = asyncio.ensure_future(asyncio.gather(*(db.write(insert(f"k{i}", where)) for i in range(5))))
    await asyncio.sleep(0.1)  # past the patience: the jobs are the thread's now
    assert not writes.done() and db._waves.jobs == []
    release.set()
    await held
    assert await asyncio.wait_for(writes, 10) == [f"k{i}" for i in range(5)]
    assert threading.get_ident() not in where and len(set(where)) == 1  # the writer thread ran them
    assert db.wave_commits == waves


async def test_a_wave_never_waits_on_another_process_lock(db: SQLiteDatabase) -> None:
    """While another connection holds the write lock, the loop keeps turning: the wave's jobs go
    to the writer thread, which waits for the lock; writes soon after go straight to the thread."""
    holder = sqlite3.connect(db.path, isolation_level=None, check_same_thread=False)
    holder.execute("BEGIN IMMEDIATE")
    where: list[int] = []
    waves = db.wave_commits
    try:
        writes = asyncio.ensure_future(asyncio.gather(*(db.write(insert(f"k{i}", where)) for i in range(5))))
        ticks = 0
        for _ in range(20):  # 0.2 s in which the loop must keep turning
            await asyncio.sleep(0.01)
            ticks += 1
        assert not writes.done() and ticks == 20
        assert db._waves.contended_until > 0  # the attempt found the lock held
    finally:
        holder.execute("ROLLBACK")
        holder.close()
    assert await asyncio.wait_for(writes, 10) == [f"k{i}" for i in range(5)]
    assert threading.get_ident() not in where and db.wave_commits == waves


async def test_closing_with_a_wave_not_yet_flushed_commits_it(tmp_path: Path) -> None:
    database = SQLiteDatabase(tmp_path / "closing.db", migrations=SCHEMA)
    writes = [asyncio.ensure_future(database.write(insert(f"k{i}"))) for i in range(5)]
    await asyncio.sleep(0)  # the five joined a wave; its flush is the loop's next callback
    assert len(database._waves.jobs) == 5
    database.close()  # the writer thread commits the wave before it stops
    assert await asyncio.wait_for(asyncio.gather(*writes), 10) == [f"k{i}" for i in range(5)]
    check = sqlite3.connect(tmp_path / "closing.db")
    try:
        assert sorted(r[0] for r in check.execute("SELECT k FROM t")) == [f"k{i}" for i in range(5)]
    finally:
        check.close()
    with pytest.raises(RuntimeError, match="closed"):
        await database.write(insert("late"))


async def test_a_caller_cancelled_while_its_job_waits_in_a_wave_hands_the_value_over(
    db: SQLiteDatabase,
) -> None:
    """The job commits all the same, and its ``abandoned`` hand-over gets the value (what
    ``start`` and ``resume_hook`` use to keep a claim whose caller stopped waiting)."""
    handed: list[str] = []
    others = [asyncio.ensure_future(db.write(insert(f"k{i}"))) for i in range(3)]
    mine = asyncio.ensure_future(db.write(insert("mine"), abandoned=handed.append))
    await asyncio.sleep(0)  # all four joined the wave; its flush is the loop's next callback
    assert len(db._waves.jobs) == 4
    mine.cancel()
    assert await asyncio.gather(*others) == ["k0", "k1", "k2"]
    with pytest.raises(asyncio.CancelledError):
        await mine
    assert handed == ["mine"] and sorted(keys(db)) == ["k0", "k1", "k2", "mine"]
