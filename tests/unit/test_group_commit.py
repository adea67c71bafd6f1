"""The group-commit writer on SQLite: both kinds of job (write functions and single statements)
batch into one transaction, statements in run-key order with the ``None`` ones alone, and one
caller's error is never another's; a write with nobody to share its commit runs inline, and the
writes of one pass of an event loop commit together on the loop (waves). (PostgreSQL's
pipelined statement groups: tests/contract/test_postgres_group_commit.py.)"""

from __future__ import annotations

import asyncio
import sqlite3
import threading
import time
from collections.abc import Callable, Iterator
from pathlib import Path

import pytest

from pyworkflow.store import GroupCommitWriter, Migration, SQLiteDatabase, _group_commit, _inline

SCHEMA = [Migration("test", 1, "t", "CREATE TABLE t (k TEXT NOT NULL UNIQUE);")]


@pytest.fixture
def db(tmp_path: Path) -> Iterator[SQLiteDatabase]:
    database = SQLiteDatabase(tmp_path / "gc.db", migrations=SCHEMA)
    yield database
    database.close()


def keys(db: SQLiteDatabase) -> list[str]:
    return [r[0] for r in db.reader().execute("SELECT k FROM t ORDER BY rowid")]


async def hold_writer(
    db: GroupCommitWriter[sqlite3.Connection],
) -> tuple[threading.Event, asyncio.Future[None]]:
    """Keep the writer thread busy until the event is set, so that what is submitted next is one
    batch. (Submitted from another thread: a write from this loop with nothing else to do would
    run inline, on the loop itself.)"""
    release, started = threading.Event(), threading.Event()

    def busy(conn: sqlite3.Connection) -> None:
        started.set()
        release.wait(10)

    held = asyncio.ensure_future(asyncio.to_thread(db.write_sync, busy))
    await asyncio.to_thread(started.wait, 10)
    return release, held


async def test_statements_of_one_batch_are_one_group_in_key_order(db: SQLiteDatabase) -> None:
    release, held = await hold_writer(db)
    groups, statements = db.groups, db.statements
    insert = "INSERT INTO t (k) VALUES (?) RETURNING k"
    futures = [db.submit(insert, (k,), key=k) for k in ("c", "a", "b")]
    futures.append(db.submit(insert, ("z-alone",), key=None))
    futures.append(db.submit("SELECT count(*) FROM t", (), key=""))  # a read: sorted first
    release.set()
    await held
    results = await asyncio.gather(*futures)
    assert results == [[("c",)], [("a",)], [("b",)], [("z-alone",)], [(0,)]]
    assert (db.groups - groups, db.statements - statements) == (1, 4)
    assert keys(db) == ["a", "b", "c", "z-alone"]


async def test_a_failing_statement_is_only_its_callers_error(db: SQLiteDatabase) -> None:
    await db.submit("INSERT INTO t (k) VALUES (?)", ("dup",), key="dup")
    release, held = await hold_writer(db)
    futures = [db.submit("INSERT INTO t (k) VALUES (?)", (k,), key=k) for k in ("x", "dup", "y")]
    release.set()
    await held
    outcomes = await asyncio.gather(*futures, return_exceptions=True)
    assert outcomes[0] == [] and outcomes[2] == []
    assert isinstance(outcomes[1], sqlite3.IntegrityError)
    assert keys(db) == ["dup", "x", "y"]  # each committed once


async def test_carried_statements_run_just_before_their_carrier_in_its_transaction(
    db: SQLiteDatabase,
) -> None:
    """Statements nobody waits for, carried by a later one of the same key: in its group, before
    it (whatever the key order of the group), each ``then`` told its rows; a failing one is only
    its own ``then``'s error, and the carrier and the rest still commit, in order."""
    heard: list[tuple[object, object]] = []

    def then(rows: object, error: object) -> None:
        heard.append((rows, type(error).__name__ if error else None))

    insert = "INSERT INTO t (k) VALUES (?) RETURNING k"
    release, held = await hold_writer(db)
    groups, statements = db.groups, db.statements
    other = db.submit(insert, ("a",), key="a")
    carrier = db.submit(
        insert,
        ("m-3",),
        key="m",
        carried=[db.statement(insert, ("m-1",), "m", then), db.statement(insert, ("m-2",), "m", then)],
    )
    release.set()
    await held
    assert await carrier == [("m-3",)] and await other == [("a",)]
    assert (db.groups - groups, db.statements - statements) == (1, 4)  # one transaction
    assert keys(db) == ["a", "m-1", "m-2", "m-3"]
    assert heard == [([("m-1",)], None), ([("m-2",)], None)]

    heard.clear()
    carrier = db.submit(
        insert,
        ("n-2",),
        key="n",
        carried=[db.statement(insert, ("m-1",), "n", then), db.statement(insert, ("n-1",), "n", then)],
    )
    assert await carrier == [("n-2",)]
    assert heard == [(None, "IntegrityError"), ([("n-1",)], None)]
    assert keys(db)[-2:] == ["n-1", "n-2"]


async def test_a_failing_function_is_only_its_callers_error(db: SQLiteDatabase) -> None:
    release, held = await hold_writer(db)
    commits = db.commits
    calls: list[str] = []

    def insert(k: str) -> object:
        def fn(conn: sqlite3.Connection) -> str:
            calls.append(k)
            if k == "bad":
                raise ValueError("refused")
            conn.execute("INSERT INTO t (k) VALUES (?)", (k,))
            return k

        return fn

    futures = [asyncio.ensure_future(db.write(insert(k))) for k in ("p", "bad", "q")]  # type: ignore[arg-type]
    await asyncio.sleep(0)  # each queued behind the held writer
    release.set()
    await held
    outcomes = await asyncio.gather(*futures, return_exceptions=True)
    assert outcomes[0] == "p" and outcomes[2] == "q" and isinstance(outcomes[1], ValueError)
    assert keys(db) == ["p", "q"]
    # The batch ran once, rolled back, then each function alone: two commits, none for "bad".
    assert calls == ["p", "bad", "p", "bad", "q"]
    assert db.commits - commits == 1 + 2


async def test_functions_and_statements_share_a_batch(db: SQLiteDatabase) -> None:
    release, held = await hold_writer(db)
    fn = asyncio.ensure_future(db.write(lambda conn: conn.execute("INSERT INTO t (k) VALUES ('f')").rowcount))
    st = db.submit("INSERT INTO t (k) VALUES (?) RETURNING k", ("s",), key="s")
    await asyncio.sleep(0)  # both queued behind the held writer
    release.set()
    await held
    assert await fn == 1 and await st == [("s",)]
    assert sorted(keys(db)) == ["f", "s"]


async def test_callers_on_several_loops_and_threads(db: SQLiteDatabase) -> None:
    def thread(k: int) -> None:
        async def main() -> None:
            await asyncio.gather(
                *(db.submit("INSERT INTO t (k) VALUES (?)", (f"{k}-{i}",), key=f"{k}-{i}") for i in range(20))
            )

        asyncio.run(main())
        db.write_sync(lambda conn: conn.execute("INSERT INTO t (k) VALUES (?)", (f"{k}-sync",)))

    threads = [threading.Thread(target=thread, args=(k,)) for k in range(4)]
    for t in threads:
        t.start()
    await asyncio.to_thread(lambda: [t.join(30) for t in threads])
    assert len(keys(db)) == 4 * 21


async def test_refusals(db: SQLiteDatabase) -> None:
    with pytest.raises(RuntimeError, match="from the writer thread"):
        await db.write(lambda conn: db.write_sync(lambda c: None))
    db.close()
    db.close()  # idempotent
    with pytest.raises(RuntimeError, match="database is closed"):
        await db.write(lambda conn: None)
    with pytest.raises(RuntimeError, match="database is closed"):
        db.submit("SELECT 1", ())


# -- deferred writes ---------------------------------------------------------------------------


def _insert(k: str) -> Callable[[sqlite3.Connection], None]:
    return lambda conn: conn.execute("INSERT INTO t (k) VALUES (?)", (k,)) and None


async def test_a_deferred_write_joins_the_next_commit_in_order(
    db: SQLiteDatabase, monkeypatch: pytest.MonkeyPatch
) -> None:
    monkeypatch.setattr(_group_commit, "DEFER_LINGER", 60.0)  # only a caller's write can take it
    outcomes: list[BaseException | None] = []
    commits = db.commits
    db.write_deferred(_insert("deferred"), outcomes.append)
    await asyncio.sleep(0.05)
    assert keys(db) == [] and outcomes == []  # nobody asked for a commit yet
    await db.write(_insert("caller"))
    assert keys(db) == ["deferred", "caller"]  # queued first, applied first
    assert db.commits - commits == 1  # one commit for both
    assert outcomes == [None]


async def test_a_deferred_write_alone_is_committed_after_the_linger(db: SQLiteDatabase) -> None:
    done = threading.Event()
    outcomes: list[BaseException | None] = []

    def then(error: BaseException | None) -> None:
        outcomes.append(error)
        done.set()

    db.write_deferred(_insert("alone"), then)
    assert await asyncio.to_thread(done.wait, 10)
    assert keys(db) == ["alone"] and outcomes == [None]


async def test_a_stream_of_deferred_writes_wakes_the_writer_once_a_linger(
    db: SQLiteDatabase, monkeypatch: pytest.MonkeyPatch
) -> None:
    """One at a time each turn's deferred end is taken by the next caller's inline write: the
    writer thread, lingering, is not woken for each (a thread switch and the GIL each time)."""
    monkeypatch.setattr(_group_commit, "DEFER_LINGER", 0.5)
    await db.write(_insert("first"))  # the writer thread asleep, nothing deferred yet
    await asyncio.sleep(0.05)
    outcomes: list[BaseException | None] = []
    wakeups, inline = db.wakeups, db.inline_commits
    started = time.monotonic()
    for i in range(100):
        db.write_deferred(_insert(f"deferred-{i}"), outcomes.append)
        await db.write(_insert(f"caller-{i}"))
    elapsed = time.monotonic() - started
    assert db.inline_commits - inline == 100  # each caller's write ran inline, taking its deferred job
    assert len(keys(db)) == 201 and outcomes == [None] * 100
    # Woken by the first deferred job, then once each linger at most (100 without the bound).
    assert db.wakeups - wakeups <= 2 + elapsed / _group_commit.DEFER_LINGER


async def test_a_failing_deferred_write_is_reported_and_fails_no_caller(
    db: SQLiteDatabase, monkeypatch: pytest.MonkeyPatch
) -> None:
    monkeypatch.setattr(_group_commit, "DEFER_LINGER", 60.0)
    await db.write(_insert("taken"))
    outcomes: list[BaseException | None] = []
    db.write_deferred(_insert("taken"), outcomes.append)  # violates UNIQUE
    await db.write(_insert("next"))
    assert keys(db) == ["taken", "next"]
    assert len(outcomes) == 1 and isinstance(outcomes[0], sqlite3.IntegrityError)


async def test_closing_commits_the_deferred_writes(tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> None:
    monkeypatch.setattr(_group_commit, "DEFER_LINGER", 60.0)
    database = SQLiteDatabase(tmp_path / "close.db", migrations=SCHEMA)
    database.write_deferred(_insert("last"), lambda error: None)
    database.close()
    reopened = SQLiteDatabase(tmp_path / "close.db", migrations=SCHEMA)
    try:
        assert keys(reopened) == ["last"]
    finally:
        reopened.close()


# -- inline writes -------------------------------------------------------------------------------


async def test_a_write_with_nobody_to_share_its_commit_runs_inline(db: SQLiteDatabase) -> None:
    where: list[int] = []

    def fn(conn: sqlite3.Connection) -> str:
        where.append(threading.get_ident())
        conn.execute("INSERT INTO t (k) VALUES ('one')")
        return "one"

    commits, inline = db.commits, db.inline_commits
    assert await db.write(fn) == "one"
    assert where == [threading.get_ident()]  # the caller's thread, not the writer's
    assert (db.commits - commits, db.inline_commits - inline) == (1, 1)
    other = sqlite3.connect(db.path)  # committed: another connection sees it
    try:
        assert other.execute("SELECT k FROM t").fetchall() == [("one",)]
    finally:
        other.close()


async def test_concurrent_writes_still_share_commits(db: SQLiteDatabase) -> None:
    commits, inline = db.commits, db.inline_commits
    await asyncio.gather(*(db.write(_insert(f"k{i}")) for i in range(200)))
    assert len(keys(db)) == 200
    # Two hundred callers ready together: at most the last few run inline, the rest share commits.
    assert db.inline_commits - inline <= 3
    assert db.commits - commits <= 10


async def test_an_inline_write_never_waits_on_another_process_lock(db: SQLiteDatabase) -> None:
    """While another connection holds the write lock, the loop keeps running: the write goes to
    the writer thread, which waits for the lock, and commits once it is free."""
    holder = sqlite3.connect(db.path, isolation_level=None, check_same_thread=False)
    holder.execute("BEGIN IMMEDIATE")
    try:
        inline = db.inline_commits
        write = asyncio.ensure_future(db.write(_insert("after-the-lock")))
        ticks = 0
        for _ in range(20):  # 0.2 s in which the loop must keep turning
            await asyncio.sleep(0.01)
            ticks += 1
        assert not write.done() and ticks == 20
    finally:
        holder.execute("ROLLBACK")
        holder.close()
    await asyncio.wait_for(write, 10)
    assert keys(db) == ["after-the-lock"]
    assert db.inline_commits == inline  # the writer thread committed it


async def test_a_deferred_write_queued_behind_a_busy_inline_attempt_keeps_its_place(
    db: SQLiteDatabase, monkeypatch: pytest.MonkeyPatch
) -> None:
    monkeypatch.setattr(_group_commit, "DEFER_LINGER", 60.0)
    outcomes: list[BaseException | None] = []
    db.write_deferred(_insert("deferred"), outcomes.append)
    holder = sqlite3.connect(db.path, isolation_level=None, check_same_thread=False)
    holder.execute("BEGIN IMMEDIATE")
    write = asyncio.ensure_future(db.write(_insert("caller")))
    await asyncio.sleep(0.05)  # the inline attempt found the lock held and queued both
    holder.execute("ROLLBACK")
    holder.close()
    await asyncio.wait_for(write, 10)
    assert keys(db) == ["deferred", "caller"] and outcomes == [None]


async def test_writer_statements_prepare_every_writer_connection_outside_transactions(
    db: SQLiteDatabase,
) -> None:
    """``prepare_writers``: TEMP objects a store writes through are made on each writer connection
    before its first transaction (a batch that rolls back does not take them away, being made
    outside it), on a connection opened later too, once each; nothing lands in the file's schema,
    and readers do not see them."""
    db.prepare_writers(
        [
            "CREATE TEMP VIEW IF NOT EXISTS t_add (k) AS SELECT NULL WHERE 0",
            "CREATE TEMP TRIGGER IF NOT EXISTS t_add INSTEAD OF INSERT ON t_add"
            " BEGIN INSERT INTO t (k) VALUES (NEW.k); INSERT INTO t (k) VALUES (NEW.k || '+'); END",
        ]
    )
    db.prepare_writers(
        ["CREATE TEMP VIEW IF NOT EXISTS t_add (k) AS SELECT NULL WHERE 0"]
    )  # known: kept once
    assert len(db._writer_statements) == 2

    def then_fail(conn: sqlite3.Connection) -> None:
        conn.execute("INSERT INTO t_add (k) VALUES ('a')")
        raise RuntimeError("rolled back")

    with pytest.raises(RuntimeError, match="rolled back"):
        await db.write(then_fail)  # the first transaction after prepare_writers
    await db.write(lambda conn: conn.execute("INSERT INTO t_add (k) VALUES ('c')"))
    assert keys(db) == ["c", "c+"]

    later = db._connect_writer(None)  # as after a lost connection
    try:
        db._begin(later)
        later.execute("INSERT INTO t_add (k) VALUES ('d')")
        later.execute("COMMIT")
        assert later.prepared == 2
    finally:
        later.close()
    assert keys(db)[-2:] == ["d", "d+"]
    schema = db.reader().execute("SELECT name FROM sqlite_master WHERE name LIKE 't_add%'").fetchall()
    assert schema == []
    with pytest.raises(sqlite3.OperationalError, match="no such table"):
        db.reader().execute("SELECT * FROM t_add")


# -- waves ---------------------------------------------------------------------------------------
# The writes that many callers on one event loop make in one pass of the loop are committed
# together on the loop itself (``_flush_wave``), not handed to the writer thread and back; the
# writer thread still takes them when it has the connection past a short wait, when another
# process holds the write lock, or when the database closes first.


def _noting(k: str, where: list[int] | None = None) -> Callable[[sqlite3.Connection], str]:
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
    values = await asyncio.gather(*(db.write(_noting(f"k{i}", where)) for i in range(n)))
    assert values == [f"k{i}" for i in range(n)]  # each caller its own value
    assert sorted(keys(db)) == sorted(values)
    assert set(where) == {threading.get_ident()}  # every one on the loop's thread
    # One wave, in transactions of at most MAX_GROUP jobs: three commits, none by the thread.
    assert db.wave_commits - waves == 3
    assert db.commits - commits == 3


async def test_a_failing_function_in_a_wave_is_only_its_callers_error(db: SQLiteDatabase) -> None:
    where: list[int] = []
    outcomes = await asyncio.gather(
        *(db.write(_noting(k, where)) for k in ("a", "b", "bad", "c", "d")), return_exceptions=True
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
        db.write_deferred(_noting("deferred"), outcomes.append)
        await db.write(_noting("after"))

    await asyncio.gather(
        *(db.write(_noting(f"before{i}")) for i in range(4)),
        defer_then_write(),
        *(db.write(_noting(f"later{i}")) for i in range(2)),
    )
    assert keys(db) == ["before0", "before1", "before2", "before3", "deferred", "after", "later0", "later1"]
    assert outcomes == [None]
    assert (db.commits - commits, db.wave_commits - waves) == (1, 1)


async def test_a_wave_waits_a_little_for_the_busy_writer_then_commits_on_the_loop(db: SQLiteDatabase) -> None:
    release, held = await hold_writer(db)
    where: list[int] = []
    waves = db.wave_commits
    writes = asyncio.ensure_future(asyncio.gather(*(db.write(_noting(f"k{i}", where)) for i in range(5))))
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
    writes = asyncio.ensure_future(asyncio.gather(*(db.write(_noting(f"k{i}", where)) for i in range(5))))
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
        writes = asyncio.ensure_future(asyncio.gather(*(db.write(_noting(f"k{i}", where)) for i in range(5))))
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
    writes = [asyncio.ensure_future(database.write(_noting(f"k{i}"))) for i in range(5)]
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
        await database.write(_noting("late"))


async def test_a_caller_cancelled_while_its_job_waits_in_a_wave_hands_the_value_over(
    db: SQLiteDatabase,
) -> None:
    """The job commits all the same, and its ``abandoned`` hand-over gets the value (what
    ``start`` and ``resume_hook`` use to keep a claim whose caller stopped waiting)."""
    handed: list[str] = []
    others = [asyncio.ensure_future(db.write(_noting(f"k{i}"))) for i in range(3)]
    mine = asyncio.ensure_future(db.write(_noting("mine"), abandoned=handed.append))
    await asyncio.sleep(0)  # all four joined the wave; its flush is the loop's next callback
    assert len(db._waves.jobs) == 4
    mine.cancel()
    assert await asyncio.gather(*others) == ["k0", "k1", "k2"]
    with pytest.raises(asyncio.CancelledError):
        await mine
    assert handed == ["mine"] and sorted(keys(db)) == ["k0", "k1", "k2", "mine"]
