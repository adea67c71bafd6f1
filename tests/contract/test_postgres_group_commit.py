"""PostgreSQL only: the group commit. Statements submitted while the writer is busy share one
transaction; each caller is released only after that transaction committed; one statement's
error is never another caller's; a lost connection fails only the statements in flight; callers
on several event loops (threads) share the writer."""

from __future__ import annotations

import asyncio
import secrets
import select
import threading

import psycopg
import pytest

from pyworkflow.store import (
    Fence,
    Migration,
    NewWait,
    PostgresDatabase,
    PostgresStore,
    WaitKind,
    _group_commit,
    _pg_carry,
)
from pyworkflow.store._pg_db import PgConnection, dropped

pytestmark = pytest.mark.postgres
T0 = 1_700_000_000.0


def _count_runs(url: str, prefix: str, *, exact: bool = False) -> int:
    sql = "SELECT count(*) FROM runs WHERE id = %s" if exact else "SELECT count(*) FROM runs WHERE id LIKE %s"
    with psycopg.connect(url) as conn:
        row = conn.execute(sql, (prefix if exact else prefix + "%",)).fetchone()
    assert row is not None
    return int(row[0])


async def _busy_writer(store: PostgresStore, seconds: float) -> asyncio.Future[object]:
    """Keep every writer busy so that what is submitted next waits and forms one group."""
    tasks = []
    for _ in store._writer._threads:
        tasks.append(asyncio.ensure_future(store._alone("SELECT pg_sleep(?)", (seconds,))))
        for _ in range(200):  # taken by one writer before the next is submitted
            await asyncio.sleep(0.01)
            if not store._writer._queue:
                break
    return asyncio.gather(*tasks)


async def test_a_group_commits_before_its_callers_are_released(
    pg_database: str, pg_store: PostgresStore
) -> None:
    busy = await _busy_writer(pg_store, 0.3)
    groups, statements = pg_store._writer.groups, pg_store._writer.statements

    async def start(i: int) -> int:
        await pg_store.create_run(f"g{i}", "wf", b"{}", now=T0, lease_owner="w", lease_ttl=30)
        # Released: the transaction holding it has committed (another connection sees it).
        return _count_runs(pg_database, f"g{i}", exact=True)

    seen = await asyncio.gather(*(start(i) for i in range(40)))
    await busy
    assert seen == [1] * 40
    # Most of them shared a transaction.
    assert pg_store._writer.statements - statements == 40
    assert pg_store._writer.groups - groups < 10


async def test_a_failing_statement_is_only_its_callers_error(
    pg_database: str, pg_store: PostgresStore
) -> None:
    await pg_store.create_run("dup", "wf", b"{}", now=T0, lease_owner="w", lease_ttl=30)
    busy = await _busy_writer(pg_store, 0.3)
    results = await asyncio.gather(
        *(
            pg_store.create_run(f"ok{i}", "wf", b"{}", now=T0, lease_owner="w", lease_ttl=30)
            for i in range(20)
        ),
        pg_store.create_run("dup", "wf", b"{}", now=T0, lease_owner="w", lease_ttl=30),
        *(
            pg_store.create_run(f"ok{i}", "wf", b"{}", now=T0, lease_owner="w", lease_ttl=30)
            for i in range(20, 40)
        ),
        return_exceptions=True,
    )
    await busy
    errors = [r for r in results if isinstance(r, BaseException)]
    assert len(errors) == 1 and isinstance(errors[0], psycopg.errors.UniqueViolation)
    assert _count_runs(pg_database, "ok") == 40
    assert len(await pg_store.get_events("ok0")) == 1  # each committed exactly once


async def test_a_cancelled_caller_still_commits(pg_database: str, pg_store: PostgresStore) -> None:
    busy = await _busy_writer(pg_store, 1.0)
    task = asyncio.ensure_future(
        pg_store.create_run("c1", "wf", b"{}", now=T0, lease_owner=None, lease_ttl=0)
    )
    # Cancelled once its statement is queued for the (busy) writer: a fixed sleep was too short
    # on a loaded machine, and the caller was cancelled before it had submitted anything.
    for _ in range(500):
        await asyncio.sleep(0.01)
        if pg_store._writer._queue:
            break
    assert pg_store._writer._queue, "create_run never reached the writer's queue"
    task.cancel()
    with pytest.raises(asyncio.CancelledError):
        await task
    await busy
    # The statement runs to its commit although nobody waits for it. (Looked for until then: with
    # several writer threads the read may run beside the group that holds it, before it commits.)
    for _ in range(500):
        if await pg_store.get_run("c1") is not None:
            break
        await asyncio.sleep(0.01)
    assert await pg_store.get_run("c1") is not None


def _end_connections(url: str) -> int:
    """Terminate every other connection to the database, as a restart does between statements,
    and wait until their backends are gone (their goodbyes are on the sockets by then)."""
    with psycopg.connect(url, autocommit=True) as admin:
        row = admin.execute(
            "SELECT count(*) FILTER (WHERE pg_terminate_backend(pid, 5000)) FROM pg_stat_activity"
            " WHERE datname = current_database() AND pid <> pg_backend_pid()"
        ).fetchone()
    assert row is not None
    return int(row[0])


def _backends(url: str) -> set[int]:
    with psycopg.connect(url, autocommit=True) as admin:
        rows = admin.execute(
            "SELECT pid FROM pg_stat_activity WHERE datname = current_database() AND pid <> pg_backend_pid()"
        ).fetchall()
    return {int(r[0]) for r in rows}


async def test_connections_the_server_ended_while_idle_are_replaced_before_use(
    pg_database: str, pg_store: PostgresStore
) -> None:
    """PostgreSQL restarting between statements ends every idle connection of the store (the
    writers', the inline one, the readers', the pool's). Each is found ended before it is used
    and replaced: no caller fails, although before, the first statement on each failed (its
    caller could not know whether it had committed)."""
    claim = await pg_store.create_run("before", "wf", b"{}", now=T0, lease_owner="w", lease_ttl=30)
    assert claim is not None
    assert await pg_store.get_run("before") is not None  # a reader exists
    assert await pg_store.expire_leases_of(["nobody"], now=T0) == 0  # a pooled connection exists
    ended = _backends(pg_database)
    assert _end_connections(pg_database) == len(ended) >= 2
    for i in range(10):  # the inline connection, or a writer when it is busy
        await pg_store.create_run(f"after{i}", "wf", b"{}", now=T0, lease_owner=None, lease_ttl=0)
    await pg_store.complete_step(claim.fence, "s#1", b"1", now=T0)
    assert [await pg_store.get_run(f"after{i}") is not None for i in range(10)] == [True] * 10
    assert await pg_store.expire_leases_of(["w"], now=T0 + 60) == 1
    assert _count_runs(pg_database, "after") == 10
    assert not ended & _backends(pg_database)  # every connection in use now is a new one


async def test_a_connection_ended_under_a_write_fails_that_write_only(pg_database: str) -> None:
    """A connection lost while a write is on it cannot say whether the write committed: that
    write fails with the driver's error (it is not retried), and the next one reconnects."""
    schema = [Migration("test", 1, "t", "CREATE TABLE t (k text PRIMARY KEY);")]
    db = PostgresDatabase(pg_database, migrations=schema)
    try:
        await db.write(lambda conn: conn.execute("INSERT INTO t (k) VALUES (?)", ("a",)))

        def lost(conn: PgConnection) -> None:
            conn.execute("INSERT INTO t (k) VALUES (?)", ("lost",))
            conn.execute("SELECT pg_terminate_backend(pg_backend_pid())")

        with pytest.raises(psycopg.OperationalError):
            await db.write(lost)
        assert await db.write(lambda conn: conn.execute("INSERT INTO t (k) VALUES (?)", ("b",)).rowcount) == 1
    finally:
        db.close()
    with psycopg.connect(pg_database) as conn:
        assert [r[0] for r in conn.execute("SELECT k FROM t ORDER BY k")] == ["a", "b"]


async def test_a_notification_on_an_idle_connection_keeps_it(pg_database: str) -> None:
    """Bytes on an idle connection's socket are not always a goodbye: a notification (or a
    notice) is read and the connection kept; a terminated one is dropped."""
    kept = PgConnection(psycopg.connect(pg_database, autocommit=True))
    ended = PgConnection(psycopg.connect(pg_database, autocommit=True))
    try:
        pid = kept.raw.info.backend_pid
        kept.execute("LISTEN pw_test")
        with psycopg.connect(pg_database, autocommit=True) as other:
            other.execute("NOTIFY pw_test, 'hello'")
            other.execute("SELECT pg_terminate_backend(%s, 5000)", (ended.raw.info.backend_pid,))
        assert select.select([kept.raw.fileno()], [], [], 5)[0]  # the notification arrived
        assert kept.usable and not dropped(kept.raw)
        assert kept.execute("SELECT pg_backend_pid()").fetchone()[0] == pid
        assert not ended.usable and dropped(ended.raw)
    finally:
        kept.close()
        ended.close()


async def test_callers_on_many_loops_share_the_writer(pg_database: str, pg_store: PostgresStore) -> None:
    failures: list[BaseException] = []

    def thread(k: int) -> None:
        async def main() -> None:
            for i in range(20):
                claim = await pg_store.create_run(
                    f"t{k}-{i}", "wf", b"{}", now=T0, lease_owner="w", lease_ttl=30
                )
                assert claim is not None
                await pg_store.complete_step(claim.fence, "s#1", b"1", now=T0)
                await pg_store.complete_run(claim.fence, b"1", now=T0)

        try:
            asyncio.run(main())
        except BaseException as exc:
            failures.append(exc)

    threads = [threading.Thread(target=thread, args=(k,)) for k in range(4)]
    for t in threads:
        t.start()
    await asyncio.to_thread(lambda: [t.join(60) for t in threads])
    assert not failures
    assert _count_runs(pg_database, "t") == 80
    run = await pg_store.get_run("t3-19")
    assert run is not None and run.status == "completed"


async def test_write_functions_and_statements_share_the_writer_and_survive_a_lost_connection(
    pg_database: str,
) -> None:
    """The database class the graph server uses: write functions and statements (rows as plain
    tuples), both in the kit's SQL, through one writer; its connection ended while idle (a
    restart between requests) is replaced before the next write, which succeeds."""
    schema = [Migration("test", 1, "t", "CREATE TABLE t (k text PRIMARY KEY);")]
    db = PostgresDatabase(pg_database, migrations=schema)
    try:
        await db.write(lambda conn: conn.execute("INSERT INTO t (k) VALUES (?)", ("a",)))
        rows = await db.submit("INSERT INTO t (k) VALUES (?) RETURNING k, 1", ("s",), key="s")
        assert rows == [("s", 1)] and type(rows[0]) is tuple
        assert _end_connections(pg_database) >= 1
        assert await db.write(lambda conn: conn.execute("INSERT INTO t (k) VALUES (?)", ("b",)).rowcount) == 1
        assert await db.submit("INSERT INTO t (k) VALUES (?) RETURNING k", ("c",), key="c") == [("c",)]
        assert db.write_sync(lambda conn: conn.execute("SELECT count(*) FROM t").fetchone()[0]) == 4
    finally:
        db.close()
    with psycopg.connect(pg_database) as conn:
        assert [r[0] for r in conn.execute("SELECT k FROM t ORDER BY k")] == ["a", "b", "c", "s"]


async def test_a_deferred_checkpoint_deletion_rides_in_the_steps_transaction(pg_store: PostgresStore) -> None:
    """``delete_checkpoint(defer=True)`` sends nothing; the turn's next statement (the step's
    result) carries it into its own transaction: two statements, one group, one commit; the
    deletion and its event come first. Before, the deletion was a transaction of its own."""
    claim = await pg_store.create_run("defer-1", "wf", b"{}", now=T0, lease_owner="w1", lease_ttl=30.0)
    assert claim is not None
    fence = claim.fence
    assert await pg_store.save_checkpoint(fence, "s#1", "", b"1", expected_revision=0, now=T0) == 1
    writer = pg_store._writer
    groups, statements = writer.groups, writer.statements
    assert await pg_store.delete_checkpoint(fence, "s#1", "", now=T0 + 1, defer=True)
    assert (writer.groups, writer.statements) == (groups, statements)  # nothing sent yet
    assert (await pg_store.load_state("defer-1")).checkpoints != {}  # nor written
    await pg_store.complete_step(fence, "s#1", b"{}", now=T0 + 2)
    assert (writer.groups - groups, writer.statements - statements) == (1, 2)
    events = [e.type for e in await pg_store.get_events("defer-1")]
    assert events[-2:] == ["checkpoint_deleted", "step_completed"]
    assert (await pg_store.load_state("defer-1")).checkpoints == {}


async def test_deferred_statements_are_kept_for_a_bounded_number_of_runs(
    pg_store: PostgresStore, monkeypatch: pytest.MonkeyPatch
) -> None:
    """A turn that crashed after deferring a deletion may never write its run here again: past the
    bound the oldest run's deferred statements are dropped (as the crash would have), and its
    step's result still deletes the checkpoint, without the deletion's own event."""
    monkeypatch.setattr(_pg_carry, "MAX_RUNS", 2)
    fences = []
    for i in range(3):
        claim = await pg_store.create_run(f"bound-{i}", "wf", b"{}", now=T0, lease_owner="w1", lease_ttl=30.0)
        assert claim is not None
        fences.append(claim.fence)
        assert await pg_store.save_checkpoint(claim.fence, "s#1", "", b"1", expected_revision=0, now=T0) == 1
        assert await pg_store.delete_checkpoint(claim.fence, "s#1", "", now=T0, defer=True)
    assert sorted(pg_store._deferred.runs) == ["bound-1", "bound-2"]
    for fence in fences:
        await pg_store.complete_step(fence, "s#1", b"{}", now=T0 + 1)
        assert (await pg_store.load_state(fence.run_id)).checkpoints == {}
    deleted = ["checkpoint_deleted" in [e.type for e in await pg_store.get_events(f.run_id)] for f in fences]
    assert deleted == [False, True, True] and pg_store._deferred.runs == {}


async def _suspended_recorded(
    store: PostgresStore, run_id: str
) -> tuple[Fence, bytes, asyncio.Future[object]]:
    """A turn that suspends on a new step hook the way the engine does: the wait with the
    suspension, then the end of the turn, nobody waiting for it (the future: its outcome)."""
    claim = await store.create_run(run_id, "wf", b"{}", now=T0, lease_owner="w1", lease_ttl=30.0)
    assert claim is not None
    token = secrets.token_bytes(32)
    hook = NewWait(
        secrets.token_hex(8), "s#1/step_hook:ok#1", WaitKind.STEP_HOOK, "ok", "s#1", token, None, None
    )
    wait = await store.create_wait(claim.fence, hook, now=T0, suspend=True)
    loop = asyncio.get_running_loop()
    ended: asyncio.Future[object] = loop.create_future()
    await store.suspend_run(
        claim.fence, notified=[wait.id], delivered={}, now=T0, recorded=True,
        then=lambda error: loop.call_soon_threadsafe(ended.set_result, error),
    )  # fmt: skip
    return claim.fence, token, ended


async def test_the_end_of_a_suspended_turn_is_sent_again_when_its_connection_is_lost(
    pg_database: str, pg_store: PostgresStore, monkeypatch: pytest.MonkeyPatch
) -> None:
    """PostgreSQL ending the connection that carries the end of a suspended turn (here: its
    backend, waiting on the run's row, terminated): the statement is sent again a moment later
    and written, so the run's lease is freed then, not when it runs out (30 s). Before, the
    failure was logged and the run kept its lease."""
    monkeypatch.setattr(_pg_carry, "RESEND_SECONDS", 0.2)
    claim = await pg_store.create_run("resend-1", "wf", b"{}", now=T0, lease_owner="w1", lease_ttl=30.0)
    assert claim is not None
    hook = NewWait(secrets.token_hex(8), "s#1/step_hook:ok#1", WaitKind.STEP_HOOK, "ok", "s#1",
                   secrets.token_bytes(32), None, None)  # fmt: skip
    wait = await pg_store.create_wait(claim.fence, hook, now=T0, suspend=True)
    loop = asyncio.get_running_loop()
    ended: asyncio.Future[object] = loop.create_future()
    with psycopg.connect(pg_database) as holder:  # the run's queue row, locked in a transaction
        holder.execute("SELECT 1 FROM queue WHERE run_id = 'resend-1' FOR UPDATE")
        await pg_store.suspend_run(
            claim.fence, notified=[wait.id], delivered={}, now=T0, recorded=True,
            then=lambda error: loop.call_soon_threadsafe(ended.set_result, error),
        )  # fmt: skip
        blocked: list[int] = []
        for _ in range(200):  # the end of the turn, sent after the writer's linger, waits on the row
            with psycopg.connect(pg_database, autocommit=True) as admin:
                blocked = [
                    int(r[0])
                    for r in admin.execute(
                        "SELECT pid FROM pg_stat_activity WHERE datname = current_database()"
                        " AND wait_event_type = 'Lock' AND pid <> pg_backend_pid()"
                    )
                ]
                if blocked:
                    admin.execute("SELECT pg_terminate_backend(%s, 5000)", (blocked[0],))
                    break
            await asyncio.sleep(0.02)
        assert blocked, "the end of the turn never reached PostgreSQL"
        assert not ended.done()  # not reported as failed: it is on its way again
    assert await asyncio.wait_for(ended, 10) is None  # written once the row was free
    with psycopg.connect(pg_database) as conn:
        assert conn.execute("SELECT count(*) FROM queue WHERE run_id = 'resend-1'").fetchone() == (0,)
    assert pg_store._deferred.runs == {}


async def test_the_end_of_a_suspended_turn_rides_with_the_next_write(
    pg_store: PostgresStore, monkeypatch: pytest.MonkeyPatch
) -> None:
    """One run at a time: the end of a suspended turn waits for the next run's first statement
    and commits in its transaction (SQLite's deferred write, on two writers). The linger is held
    long: on a loaded machine the next statement can come after 10 ms, and the end of the turn
    then commits alone (the test after this one)."""
    monkeypatch.setattr(_group_commit, "DEFER_LINGER", 60.0)  # only the next write can take it
    await pg_store._fetch("SELECT 1", None)  # both writers idle
    _, _, ended = await _suspended_recorded(pg_store, "ride-1")
    writer = pg_store._writer
    groups, statements = writer.groups, writer.statements
    await pg_store.get_run("ride-1")  # a read does not take it: it waits for a write
    assert not ended.done()
    assert await pg_store.create_run("ride-2", "wf", b"{}", now=T0, lease_owner="w1", lease_ttl=30.0)
    assert await asyncio.wait_for(ended, 10) is None
    assert (writer.groups - groups, writer.statements - statements) == (1, 2)  # one transaction


async def test_the_end_of_a_suspended_turn_alone_is_written_after_the_linger(pg_store: PostgresStore) -> None:
    _, _, ended = await _suspended_recorded(pg_store, "alone-1")
    assert await asyncio.wait_for(ended, 10) is None  # DEFER_LINGER later, on its own
    rows = pg_store._writer.read(
        lambda c: c.execute("SELECT count(*) FROM queue WHERE run_id = ?", ("alone-1",)).fetchall()
    )
    assert rows == [(0,)]


async def test_a_decision_right_after_the_suspension_carries_the_end_of_the_turn(
    pg_store: PostgresStore, monkeypatch: pytest.MonkeyPatch
) -> None:
    """The run's next statement, here a decision in the same process, takes the end of the turn
    from the queue and runs it first, in its own transaction: the lease is free, so the decision
    claims the run there and then. (The linger held long, as above.)"""
    monkeypatch.setattr(_group_commit, "DEFER_LINGER", 60.0)
    _, token, ended = await _suspended_recorded(pg_store, "decide-1")
    writer = pg_store._writer
    groups, statements = writer.groups, writer.statements
    _, claim = await pg_store.resolve_wait_and_claim(
        token_digest=token, payload=b"1", now=T0 + 1, check=None, owner="w2", lease_ttl=30.0, max_crashes=3
    )
    assert await asyncio.wait_for(ended, 10) is None
    assert claim is not None and claim.fence.run_id == "decide-1" and claim.resumed
    assert (writer.groups - groups, writer.statements - statements) == (1, 2)


async def test_a_statement_of_the_run_waits_for_the_end_of_its_turn_already_sent(
    pg_database: str, pg_store: PostgresStore
) -> None:
    """The end of the turn was taken by a writer (alone, after the linger) and is held up by a
    lock; the run's next statement does not overtake it: it waits, then claims the freed run."""
    with psycopg.connect(pg_database) as locker:
        _, token, ended = await _suspended_recorded(pg_store, "held-1")
        locker.execute("SELECT 1 FROM runs WHERE id = 'held-1' FOR UPDATE")
        await asyncio.sleep(0.2)  # past the linger: a writer took it, and waits for the lock
        assert not ended.done() and pg_store._deferred.runs.get("held-1")
        decision = asyncio.ensure_future(
            pg_store.resolve_wait_and_claim(
                token_digest=token, payload=b"1", now=T0 + 1, check=None, owner="w2", lease_ttl=30.0,
                max_crashes=3,
            )
        )  # fmt: skip
        await asyncio.sleep(0.2)
        assert not decision.done()
        locker.rollback()
    assert await asyncio.wait_for(ended, 10) is None
    _, claim = await asyncio.wait_for(decision, 10)
    assert claim is not None and claim.fence.run_id == "held-1"


async def test_a_lone_statement_is_sent_on_the_callers_thread(
    pg_database: str, pg_store: PostgresStore
) -> None:
    """Every writer idle, nothing queued, nothing else ready on the loop: the statement is sent on
    the caller's own thread (no hand-off to a writer and back), and committed when it returns."""
    writer = pg_store._writer
    await pg_store._fetch("SELECT 1", None)  # the writers idle again
    inline, groups = writer.inline_commits, writer.groups
    claim = await pg_store.create_run("lone-1", "wf", b"{}", now=T0, lease_owner="w1", lease_ttl=30.0)
    assert claim is not None and _count_runs(pg_database, "lone-1", exact=True) == 1
    await pg_store.complete_run(claim.fence, b"1", now=T0)
    assert (writer.inline_commits - inline, writer.groups - groups) == (2, 0)
    run = await pg_store.get_run("lone-1")
    assert run is not None and run.status == "completed"


async def test_a_lone_write_takes_the_deferred_statements_along_and_a_read_does_not(
    pg_store: PostgresStore, monkeypatch: pytest.MonkeyPatch
) -> None:
    monkeypatch.setattr(_group_commit, "DEFER_LINGER", 60.0)  # only a write can take it
    await pg_store._fetch("SELECT 1", None)
    _, _, ended = await _suspended_recorded(pg_store, "along-1")
    writer = pg_store._writer
    assert len(writer._queue) == 1  # the end of the turn, waiting for a write
    inline, groups, statements = writer.inline_commits, writer.groups, writer.statements
    await pg_store._fetch("SELECT 1", None)  # a read inline: alone, in autocommit
    assert len(writer._queue) == 1 and writer.inline_commits == inline + 1
    assert await pg_store.create_run("along-2", "wf", b"{}", now=T0, lease_owner="w1", lease_ttl=30.0)
    assert writer._queue == [] and await asyncio.wait_for(ended, 10) is None
    assert (writer.inline_commits - inline, writer.groups - groups, writer.statements - statements) == (
        2,
        1,
        2,
    )


async def test_a_statement_whose_run_is_locked_elsewhere_waits_on_a_writer(
    pg_database: str, pg_store: PostgresStore
) -> None:
    """Inline, the statement waits at most INLINE_LOCK_MS for its run; then it is rolled back and a
    writer runs it once the lock is free (the event loop is not held meanwhile)."""
    claim = await pg_store.create_run("locked-1", "wf", b"{}", now=T0, lease_owner="w1", lease_ttl=30.0)
    assert claim is not None
    writer = pg_store._writer
    inline = writer.inline_commits
    with psycopg.connect(pg_database) as other:
        other.execute("SELECT 1 FROM runs WHERE id = 'locked-1' FOR UPDATE")
        finishing = asyncio.ensure_future(pg_store.complete_run(claim.fence, b"1", now=T0))
        ticks = 0
        while ticks < 20:  # the loop keeps running while the statement waits on a writer
            await asyncio.sleep(0.01)
            ticks += 1
        assert not finishing.done() and writer.inline_commits == inline
        other.commit()
    await asyncio.wait_for(finishing, 10)
    run = await pg_store.get_run("locked-1")
    assert run is not None and run.status == "completed"


async def test_a_statement_that_fails_inline_is_its_callers_error_and_rolls_back_nothing_else(
    pg_database: str, pg_store: PostgresStore, monkeypatch: pytest.MonkeyPatch
) -> None:
    """The end of a suspended turn queued for the next write rides with a lone statement that
    fails: that transaction rolls back, the caller gets its error, and the end of the turn still
    commits (the writers run each statement alone, as for a failed group)."""
    monkeypatch.setattr(_group_commit, "DEFER_LINGER", 60.0)
    await pg_store.create_run("dup-1", "wf", b"{}", now=T0, lease_owner=None, lease_ttl=0)
    await pg_store._fetch("SELECT 1", None)
    _, _, ended = await _suspended_recorded(pg_store, "failing-1")
    inline = pg_store._writer.inline_commits
    with pytest.raises(psycopg.errors.UniqueViolation):
        await pg_store.create_run("dup-1", "wf", b"{}", now=T0, lease_owner=None, lease_ttl=0)
    assert pg_store._writer.inline_commits == inline  # rolled back inline, then run by a writer
    assert await asyncio.wait_for(ended, 10) is None
    rows = pg_store._writer.read(
        lambda c: c.execute("SELECT count(*) FROM queue WHERE run_id = ?", ("failing-1",)).fetchall()
    )
    assert rows == [(0,)]  # the turn ended: its lease freed, the suspended run not queued
    assert _count_runs(pg_database, "dup-1", exact=True) == 1


async def test_a_store_without_inline_statements_hands_every_one_to_the_writers(pg_database: str) -> None:
    store = PostgresStore(pg_database, inline=False)
    try:
        claim = await store.create_run("threads-1", "wf", b"{}", now=T0, lease_owner="w1", lease_ttl=30.0)
        assert claim is not None
        await store.complete_run(claim.fence, b"1", now=T0)
        run = await store.get_run("threads-1")
        assert run is not None and run.status == "completed" and store._writer.inline_commits == 0
    finally:
        store.close()
