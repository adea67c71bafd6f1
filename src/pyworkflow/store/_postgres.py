"""The PostgreSQL store: psycopg 3, for more than one machine.

Every transition is one transaction. Nearly all are one statement each (a new run: one statement
with CTEs; a turn's step result, checkpoint, wait, suspension and end, a decision, a
cancellation, a claim (a Celery turn's, a runtime's tick, ``claim``) and the sweeper's expiry:
server-side functions from migrations 0002-0004 and 0007-0009, where each rule is written once,
e.g. the crash limit in ``pyworkflow_claim_row`` and the end of a run in ``pyworkflow_end_run``),
and those, with the single-statement reads, go through a **group commit** (the
statement jobs of :class:`~pyworkflow.store.GroupCommitWriter`, run by a
:class:`~pyworkflow.store.PostgresDatabase`): two writer threads, each with one synchronous
connection; a free writer takes every statement submitted
since a writer last looked and sends them in one pipelined transaction (``BEGIN``, the statements,
``COMMIT``: one round trip), then releases each caller, on the caller's own event loop, after that
commit. Many runs' transitions share one round trip, one commit and one fsync, and the client
spends a small fraction of the Python time a call of its own costs. Durability is unchanged:
``synchronous_commit`` as the server has it (on by default), and no caller learns the outcome of
its statement before the transaction holding it has committed. A statement that fails (an error;
a refusal such as ``lease_lost`` is a result, not an error) rolls its group back, and each
statement of the group is then run again alone, so one caller's error is never another's. A lost
connection fails the callers of the group in flight, as it would fail one call (whether it
committed is unknown, as for any call); the writer reconnects for the next. The few
multi-statement transitions (a failed step, a release, a checkpoint deletion, a second token,
heartbeats) keep their own transactions on a small async pool.

A run's ``runs`` row is its lock: each transaction that changes a run takes ``SELECT ... FOR
UPDATE`` on it first (claims take it with ``SKIP LOCKED``) and then changes that run's rows, so
transitions of one run serialize and the epoch read by a fenced write cannot change before it
commits. Transactions that lock several runs lock them in run id order: a group is sorted by run
id (reads, which lock nothing, first), the sweeper's expiry goes in run id order, and the
multi-row lease updates (heartbeat, freeing dead owners' leases), which touch queue rows without
their runs' locks, lock those rows in run id order too. Statements that may lock several runs in
another order (a runtime's ``poll``, ``claim``, the expiry) run alone, never in a group. So transactions
never wait on each other in a cycle. A transaction that makes a run due sends ``NOTIFY
pyworkflow_queue`` (delivered at commit, once per transaction); :meth:`PostgresStore.subscribe`
listens.

The SQL is in :mod:`._pg_sql` (written as all the kit's SQL is, and translated for psycopg by
:func:`._pg_db.translate` on every path that sends it), the pieces of the multi-statement
transitions in :mod:`._pg_tx`.
The writers are the store's own threads; the async pool and the listener live on a private event
loop in another daemon thread. The protocol's coroutines await either from the caller's loop, so
one store serves any number of loops (the local runtime's, each Celery worker's, a test's), and
the synchronous ``close()`` finishes what was submitted and closes everything cleanly.
"""

from __future__ import annotations

import asyncio
import contextlib
import logging
import threading
from collections.abc import Awaitable, Callable, Coroutine, Sequence
from typing import Any, TypeVar

import psycopg
from psycopg_pool import AsyncConnectionPool

from .._errors import WorkflowNotFoundError
from ._jobs import LOCKS_LAST, Job, Rows
from ._manage import SQL_CANCEL_REASON, retry_run_tx
from ._migrations import Migration
from ._migrations import pyworkflow_migrations as _migrations_of
from ._pg_carry import RunDeferrals
from ._pg_celery import CeleryQueue
from ._pg_db import AsyncPgConnection, PgConnection, PostgresDatabase, check_pooled
from ._pg_sql import (
    CHANNEL,
    SQL_CREATE_RUN,
    SQL_DELETE_STEP_CHECKPOINTS,
    SQL_EVENTS,
    SQL_EXPIRE_LEASES,
    SQL_FN_CANCEL_RUN,
    SQL_FN_CLAIM_WITH_STATES,
    SQL_FN_COMPLETE_STEP,
    SQL_FN_CREATE_WAIT,
    SQL_FN_CREATE_WAIT_SUSPENDING,
    SQL_FN_DELETE_CHECKPOINT,
    SQL_FN_END_SUSPENDED_TURN,
    SQL_FN_EXPIRE_DUE_WAITS,
    SQL_FN_FINISH_RUN,
    SQL_FN_RESOLVE_TOKEN,
    SQL_FN_RESOLVE_WAIT,
    SQL_FN_RESOLVE_WAIT_AND_CLAIM,
    SQL_FN_SAVE_CHECKPOINT,
    SQL_FN_SUSPEND_RUN,
    SQL_GET_RUN,
    SQL_HEARTBEAT,
    SQL_INSERT_WAIT_TOKEN,
    SQL_LEASE_OWNERS,
    SQL_NEXT_DUE,
    SQL_NOTIFY,
    SQL_STATE,
    SQL_UNLEASE,
    SQL_UPSERT_STEP,
    SQL_WAIT_BY_ID,
    SQL_WAIT_BY_KEY,
    SQL_WAIT_BY_TOKEN,
    TOKEN_WAIT_COLUMNS,
)
from ._pg_tx import (
    _add_state_row,
    _affected,
    _check_fence,
    _check_outcome,
    _claim_in,
    _claimed,
    _claims_with_states,
    _decided,
    _event,
    _fenced,
    _first_float,
    _insert_wait,
    _refuse_second_result,
    _screened,
)
from ._protocol import (
    Claim,
    Event,
    Fence,
    NewWait,
    Poll,
    RunRecord,
    RunState,
    RunStatus,
    StepStatus,
    WaitKind,
    WaitRecord,
    WaitStatus,
)
from ._rows import (
    SQL_RUN_CURSOR,
    cancel_reason,
    check_revision,
    hook_not_found,
    list_runs_sql,
    list_waits_sql,
    log_deferred,
    pending_wait,
    run_from_row,
    wait_from_row,
)

T = TypeVar("T")
Conn = AsyncPgConnection
RawConn = psycopg.AsyncConnection[Any]
log = logging.getLogger("pyworkflow.store.postgres")


def pyworkflow_migrations() -> list[Migration]:
    """pyworkflow's PostgreSQL migrations (also ``pyworkflow.store.pyworkflow_migrations("postgres")``)."""
    return _migrations_of("postgres")


class PostgresStore(CeleryQueue):
    """:class:`~pyworkflow.store.Store` on PostgreSQL (psycopg 3: the pipelined group commit of a
    :class:`~pyworkflow.store.PostgresDatabase` with two writers for the single-statement
    transitions and reads, an ``AsyncConnectionPool`` for the others). ``inline``: a statement
    with nobody to share its commit is sent on the caller's thread, holding its event loop for
    that round trip (see ``store/_pg_db.py``, "Inline statements"); False sends every one through
    the writer threads."""

    def __init__(self, url: str, *, min_size: int = 1, max_size: int = 16, inline: bool = True) -> None:
        self.url = url
        # Migrate first, synchronously (a bad URL or a schema problem fails here, in the caller) on
        # the connection that then becomes the first writer's. Writer connections have no lock or
        # connect timeout of their own: a statement waits for its run's lock like any other.
        self._writer = PostgresDatabase(
            url,
            migrations=pyworkflow_migrations(),
            writers=2,
            lock_timeout_ms=None,
            connect_timeout=None,
            name="pyworkflow-postgres-writer",
            write_timeout=None,
            inline=inline,
        )
        self._closed = False
        #: per run, the turn's deferred statements not written yet: its next statement carries them
        self._deferred = RunDeferrals(self._writer)
        self._listeners: list[Callable[[], None]] = []
        self._listener_task: asyncio.Task[None] | None = None
        self._inflight: set[asyncio.Task[Any]] = set()
        self._loop = asyncio.new_event_loop()
        self._thread = threading.Thread(
            target=self._loop.run_forever, name="pyworkflow-postgres", daemon=True
        )
        self._thread.start()
        self._pool: AsyncConnectionPool[RawConn] = asyncio.run_coroutine_threadsafe(
            self._open_pool(min_size, max_size), self._loop
        ).result()

    async def _open_pool(self, min_size: int, max_size: int) -> AsyncConnectionPool[RawConn]:
        pool: AsyncConnectionPool[RawConn] = AsyncConnectionPool(
            self.url,
            min_size=min_size,
            max_size=max_size,
            kwargs={"autocommit": True},
            open=False,
            check=check_pooled,
        )
        await pool.open(wait=True)
        return pool

    # -- plumbing: everything runs on the store's own loop ---------------------------------------

    async def _on_loop(self, coro: Coroutine[Any, Any, T]) -> T:
        """Run ``coro`` on the store's loop and await it from the caller's. A caller that is
        cancelled stops waiting, but the transition runs to its end (commit or rollback): a
        statement is never interrupted half-way. (One hop each way, no concurrent.futures:
        this is on the path of every store call.)"""
        if self._closed:
            coro.close()
            raise RuntimeError("store is closed")
        caller = asyncio.get_running_loop()
        result: asyncio.Future[T] = caller.create_future()
        inflight = self._inflight

        def settle(task: asyncio.Task[T]) -> None:
            if result.done():
                return
            if task.cancelled():
                result.cancel()
            elif (exc := task.exception()) is not None:
                result.set_exception(exc)
            else:
                result.set_result(task.result())

        def finished(task: asyncio.Task[T]) -> None:
            # A transition in flight on the store's loop: ``close()`` lets it finish.
            inflight.discard(task)
            if not task.cancelled():
                task.exception()  # retrieved here: the caller may be gone
            with contextlib.suppress(RuntimeError):  # the caller's loop is gone: nobody waits
                caller.call_soon_threadsafe(settle, task)

        def begin() -> None:
            task = self._loop.create_task(coro)
            inflight.add(task)
            task.add_done_callback(finished)

        try:
            self._loop.call_soon_threadsafe(begin)
        except RuntimeError:
            coro.close()
            raise
        return await result

    async def _tx(self, fn: Callable[[Conn], Awaitable[T]]) -> T:
        """One transition: ``fn`` in one transaction (committed when it returns, rolled back if it raises)."""

        async def run() -> T:
            async with self._pool.connection() as conn, conn.pipeline(), conn.transaction():
                return await fn(AsyncPgConnection(conn))

        return await self._on_loop(run())

    def _submit(
        self,
        sql: str,
        params: Any,
        key: str | None,
        carried: Sequence[Job] = (),
        abandoned: Callable[[Rows], None] | None = None,
    ) -> asyncio.Future[Rows]:
        """Hand one statement to the group commit; the future settles after its transaction ended.
        A caller that is cancelled stops waiting; the statement still runs to its commit (then
        ``abandoned(rows)``). ``carried``: the run's deferred statements, run just before it
        (``RunDeferrals``)."""
        if self._closed:
            raise RuntimeError("store is closed")
        return self._writer.submit(sql, params, key, carried=carried, abandoned=abandoned)

    async def _call(self, sql: str, params: Any, run_id: str) -> str:
        """One statement that is a whole transition of ``run_id`` (a server-side function that
        locks that run first), committed in a group after the run's deferred statements; its
        outcome."""
        rows = await self._submit(
            sql, params, run_id, await self._deferred.in_order(run_id) if self._deferred else ()
        )
        return str(rows[0][0])

    async def _fetch(
        self, sql: str, params: Any, run_id: str = "", abandoned: Callable[[Rows], None] | None = None
    ) -> Rows:
        """One statement's rows: a read (no lock, ``run_id`` empty) or a transition of ``run_id``
        (after the run's deferred statements, as :meth:`_call`)."""
        carried = await self._deferred.in_order(run_id) if run_id and self._deferred else ()
        return await self._submit(sql, params, run_id, carried, abandoned)

    async def _alone(self, sql: str, params: Any) -> Rows:
        """One statement that may lock several runs in any order: its own transaction, never in a group."""
        return await self._submit(sql, params, None)

    @property
    def database(self) -> PostgresDatabase:
        """The kit database under this store (its reads serve the metrics' state gauges)."""
        return self._writer

    def close(self) -> None:
        """Let running transitions finish (up to 10 s), close the pool and stop the store's thread."""
        if self._closed:
            return
        self._closed = True
        self._writer.close()

        async def shutdown() -> None:
            if self._listener_task is not None:
                self._listener_task.cancel()
            if self._inflight:
                await asyncio.wait(set(self._inflight), timeout=10)
            await self._pool.close()

        if threading.current_thread() is self._thread:  # closed from a listener callback
            self._loop.create_task(shutdown()).add_done_callback(lambda _: self._loop.stop())
            return
        try:
            asyncio.run_coroutine_threadsafe(shutdown(), self._loop).result(timeout=30)
        finally:
            self._loop.call_soon_threadsafe(self._loop.stop)
            self._thread.join(timeout=30)
            if not self._thread.is_alive():
                self._loop.close()

    # -- notifications ---------------------------------------------------------------------------

    def subscribe(self, callback: Callable[[], None]) -> Callable[[], None]:
        """Call ``callback()`` whenever some transaction made a run due (a decision, an expiry, a new
        run, a released lease), and once when listening (re)starts. It is called from the store's
        thread: it must be thread-safe (``loop.call_soon_threadsafe(event.set)``, a
        ``threading.Event``). Returns the function that unsubscribes."""
        self._listeners.append(callback)

        def start() -> None:
            if self._listener_task is None or self._listener_task.done():
                self._listener_task = self._loop.create_task(self._listen())

        self._loop.call_soon_threadsafe(start)

        def unsubscribe() -> None:
            with contextlib.suppress(ValueError):
                self._listeners.remove(callback)

        return unsubscribe

    async def _listen(self) -> None:
        delay = 0.1
        while not self._closed:
            try:
                async with await psycopg.AsyncConnection.connect(self.url, autocommit=True) as conn:
                    await conn.execute(f"LISTEN {CHANNEL}")
                    delay = 0.1
                    self._notify_all()  # anything that happened while we were not listening
                    async for _ in conn.notifies():
                        self._notify_all()
            except asyncio.CancelledError:
                raise
            except Exception as exc:
                log.warning("LISTEN %s failed (%s); reconnecting in %.1f s", CHANNEL, exc, delay)
                await asyncio.sleep(delay)
                delay = min(delay * 2, 5.0)

    def _notify_all(self) -> None:
        for callback in list(self._listeners):
            try:
                callback()
            except Exception:
                log.exception("notification callback failed")

    # -- runs ------------------------------------------------------------------------------------

    async def create_run(
        self,
        run_id: str,
        workflow: str,
        input: bytes,
        *,
        now: float,
        lease_owner: str | None,
        lease_ttl: float,
        also: Callable[[Any], None] | None = None,
        abandoned: Callable[[Claim], None] | None = None,
    ) -> Claim | None:
        epoch = 1 if lease_owner else 0
        params = {
            "run": run_id,
            "workflow": workflow,
            "status": str(RunStatus.RUNNING if lease_owner else RunStatus.PENDING),
            "input": input,
            "now": now,
            "epoch": epoch,
            "owner": lease_owner,
            "expires": now + lease_ttl if lease_owner else None,
            "notify": not lease_owner,  # a run nobody holds is work for someone
        }
        if also is None:  # one statement, committed in a group
            lost = None
            if abandoned is not None and lease_owner:
                lost = lambda _rows: abandoned(Claim(Fence(run_id, epoch, 0), workflow, input, resumed=False))  # noqa: E731
            await self._fetch(SQL_CREATE_RUN, params, run_id, lost)
        else:
            # With what must commit with it (an operator's audit entry): a write function on the
            # same writer (not the hot path).
            def tx(conn: PgConnection) -> None:
                conn.execute(SQL_CREATE_RUN, params)
                also(conn)

            await self._writer.write(tx)
        if not lease_owner:
            return None
        return Claim(Fence(run_id, epoch, 0), workflow, input, resumed=False)

    async def get_run(self, run_id: str) -> RunRecord | None:
        rows = await self._fetch(SQL_GET_RUN, (run_id,))
        return run_from_row(rows[0]) if rows else None

    async def list_runs(
        self,
        *,
        status: RunStatus | None = None,
        workflow: str | None = None,
        limit: int = 100,
        after: str | None = None,
    ) -> list[RunRecord]:
        cursor = None
        if after is not None:
            found = await self._fetch(SQL_RUN_CURSOR, (after,))
            if not found:
                raise WorkflowNotFoundError(f"no run {after!r} to continue the list after")
            cursor = found[0]
        sql, params = list_runs_sql(status, workflow, cursor)
        return [run_from_row(r) for r in await self._fetch(sql, (*params, int(limit)))]

    async def get_events(self, run_id: str, *, after_seq: int = 0, limit: int = 10_000) -> list[Event]:
        return [Event(*r) for r in await self._fetch(SQL_EVENTS, (run_id, after_seq, limit))]

    async def load_state(self, run_id: str) -> RunState:
        state = RunState()
        for r in await self._fetch(SQL_STATE, (run_id,)):
            _add_state_row(state, r, 1)
        return state

    async def cancel_run(
        self,
        run_id: str,
        *,
        now: float,
        reason: str | None = None,
        also: Callable[[Any], None] | None = None,
    ) -> bool:
        # One statement (migration 0008): the run ends as every run does (pyworkflow_end_run).
        if reason is None and also is None:
            outcome = await self._call(SQL_FN_CANCEL_RUN, (run_id, now), run_id)
        else:
            # An operator's cancellation with its reason and audit entry: a write function on
            # the same writer, so that they commit with the cancellation (not the hot path).
            def tx(conn: PgConnection) -> str:
                row = conn.execute(SQL_FN_CANCEL_RUN, (run_id, now)).fetchone()
                ended = str(row[0]) if row is not None else "missing"
                if ended == "ok":
                    if reason is not None:
                        conn.execute(SQL_CANCEL_REASON, (cancel_reason(reason), run_id))
                    if also is not None:
                        also(conn)
                return ended

            outcome = await self._writer.write(tx)
        if outcome == "missing":
            raise WorkflowNotFoundError(f"no run {run_id!r}")
        return outcome == "ok"

    async def retry_run(self, run_id: str, *, now: float, also: Callable[[Any], None] | None = None) -> str:
        def tx(conn: PgConnection) -> str:
            outcome = retry_run_tx(conn, run_id, now)
            if outcome == "ok":
                conn.execute(f"NOTIFY {CHANNEL}")  # the runtimes listening claim it at once
                if also is not None:
                    also(conn)
            return outcome

        outcome = await self._writer.write(tx)
        if outcome == "missing":
            raise WorkflowNotFoundError(f"no run {run_id!r}")
        return outcome

    # -- the queue -------------------------------------------------------------------------------

    async def has_ready(self, *, now: float) -> bool:
        return await self.count_ready(now=now, limit=1) > 0

    async def claim(
        self, owner: str, *, limit: int, now: float, lease_ttl: float, max_crashes: int
    ) -> list[Claim]:
        # One statement (migration 0015): the rows are leased, or failed past the crash limit, by
        # pyworkflow_claim_row, as in a tick and a Celery claim, and the resumed runs' state is
        # read after them. It may lock several runs: alone.
        params = ("claim", None, owner, max(limit, 0), now, lease_ttl, max_crashes)
        return _claims_with_states(await self._alone(SQL_FN_CLAIM_WITH_STATES, params)).claims

    async def heartbeat(self, owner: str, *, lease_expires_at: float) -> int:
        async def tx(conn: Conn) -> int:
            return await _affected(conn, SQL_HEARTBEAT, {"expires": lease_expires_at, "owner": owner})

        return await self._tx(tx)

    async def expire_leases_of(self, owners: Sequence[str], *, now: float) -> int:
        async def tx(conn: Conn) -> int:
            count = await _affected(conn, SQL_EXPIRE_LEASES, {"expires": now - 1, "owners": list(owners)})
            if count:
                await conn.execute(SQL_NOTIFY)
            return count

        return await self._tx(tx)

    async def lease_owners(self, *, now: float) -> list[str]:
        return [r[0] for r in await self._fetch(SQL_LEASE_OWNERS, (now,))]

    async def next_due(self) -> float | None:
        return _first_float(await self._fetch(SQL_NEXT_DUE, None))

    async def poll(self, owner: str, *, limit: int, now: float, lease_ttl: float, max_crashes: int) -> Poll:
        params = ("poll", None, owner, max(limit, 0), now, lease_ttl, max_crashes)
        return _claims_with_states(await self._alone(SQL_FN_CLAIM_WITH_STATES, params))

    async def release(self, fence: Fence, *, now: float) -> None:
        await self._deferred.write(fence.run_id)

        async def tx(conn: Conn) -> None:
            if await _fenced(conn, fence) == "ok":
                await conn.execute(SQL_UNLEASE, (now, fence.run_id))
                await conn.execute(SQL_NOTIFY)

        await self._tx(tx)

    # -- turn writes -----------------------------------------------------------------------------

    async def complete_step(self, fence: Fence, step_key: str, result: bytes, *, now: float) -> None:
        outcome = await self._call(
            SQL_FN_COMPLETE_STEP, (fence.run_id, fence.epoch, step_key, result, now), fence.run_id
        )
        _check_outcome(outcome, fence.run_id, fence.epoch, step_key)

    async def fail_step(
        self,
        fence: Fence,
        step_key: str,
        *,
        attempt: int,
        error: bytes,
        retry: NewWait | None,
        delivered: int,
        now: float,
    ) -> None:
        await self._deferred.write(fence.run_id)

        async def tx(conn: Conn) -> None:
            await _check_fence(conn, fence)
            await _refuse_second_result(conn, fence.run_id, step_key)
            status = StepStatus.RETRYING if retry else StepStatus.FAILED
            await conn.execute(
                SQL_UPSERT_STEP,
                {"run": fence.run_id, "key": step_key, "status": str(status), "attempt": attempt,
                 "result": None, "error": error, "delivered": delivered, "now": now},
            )  # fmt: skip
            kind = "step_retrying" if retry else "step_failed"
            await _event(conn, fence.run_id, now, kind, step_key, error)
            if retry is not None:
                await _insert_wait(conn, fence.run_id, retry, now)
            else:  # a final failure: the step never runs again, its checkpoints go with it
                await conn.execute(SQL_DELETE_STEP_CHECKPOINTS, (fence.run_id, step_key))

        await self._tx(tx)

    async def save_checkpoint(
        self, fence: Fence, scope: str, name: str, value: bytes, *, expected_revision: int | None, now: float
    ) -> int:
        outcome = await self._call(
            SQL_FN_SAVE_CHECKPOINT,
            (fence.run_id, fence.epoch, scope, name, value, expected_revision, now),
            fence.run_id,
        )
        if outcome.startswith("conflict:"):  # the rule ran server-side; its refusal reads the same
            check_revision(f"checkpoint {name!r}", expected_revision, int(outcome.split(":", 1)[1]))
        return int(_check_outcome(outcome, fence.run_id, fence.epoch, name or scope))

    async def delete_checkpoint(
        self, fence: Fence, scope: str, name: str, *, now: float, defer: bool = False
    ) -> bool:
        # One statement (migration 0016), committed in a group like the other turn writes; with
        # ``defer``, carried by the turn's next statement into its transaction (usually the
        # step's result), so it costs no commit of its own.
        params = (fence.run_id, fence.epoch, scope, name, now)
        if defer:
            self._deferred.defer(
                fence, SQL_FN_DELETE_CHECKPOINT, params, log_deferred(fence, "checkpoint deletion")
            )
            return True
        outcome = await self._call(SQL_FN_DELETE_CHECKPOINT, params, fence.run_id)
        return _check_outcome(outcome, fence.run_id, fence.epoch, "") == "1"

    async def create_wait(
        self, fence: Fence, wait: NewWait, *, now: float, suspend: bool = False
    ) -> WaitRecord:
        # ``suspend``: the suspension's status and event commit with the wait (migration 0018);
        # suspend_run(recorded=True) then only ends the turn, without waiting.
        outcome = await self._call(
            SQL_FN_CREATE_WAIT_SUSPENDING if suspend else SQL_FN_CREATE_WAIT,
            (fence.run_id, fence.epoch, wait.id, wait.wait_key, str(wait.kind), wait.name, wait.step_key,
             wait.token_digest, wait.expires_at, wait.payload_schema, now),
            fence.run_id,
        )  # fmt: skip
        if outcome == "exists":
            rows = await self._fetch(SQL_WAIT_BY_KEY, (fence.run_id, wait.wait_key))
            return wait_from_row(rows[0])
        _check_outcome(outcome, fence.run_id, fence.epoch, wait.wait_key)
        return pending_wait(fence.run_id, wait, now)

    async def add_wait_token(self, fence: Fence, wait_id: str, token_digest: bytes) -> None:
        await self._deferred.write(fence.run_id)

        async def tx(conn: Conn) -> None:
            await _check_fence(conn, fence)
            await conn.execute(SQL_INSERT_WAIT_TOKEN, (token_digest, wait_id))

        await self._tx(tx)

    async def suspend_run(
        self,
        fence: Fence,
        *,
        notified: Sequence[str],
        delivered: dict[str, int],
        now: float,
        recorded: bool = False,
        then: Callable[[BaseException | None], None] | None = None,
        due: Callable[[], None] | None = None,  # unused: a run left due is NOTIFYed (subscribe)
    ) -> None:
        params = (fence.run_id, fence.epoch, fence.wake_seq, list(notified), list(delivered),
                  list(delivered.values()), now)  # fmt: skip
        if recorded:
            # The status and event committed with the wait (create_wait(suspend=True)); what is
            # left frees the lease, and a crash before it commits leaves the lease to expire and
            # the turn to run again (on_created again, at least once): no caller waits for it.
            # It joins the next group of any caller (usually the next run's first statement),
            # and a later statement of this run carries it, or waits for it (see RunDeferrals).
            done = log_deferred(fence, "end of a suspended turn", then)
            carried = await self._deferred.in_order(fence.run_id)
            self._deferred.defer(fence, SQL_FN_END_SUSPENDED_TURN, params, done, queued=True, carried=carried)
            return
        try:
            outcome = await self._call(SQL_FN_SUSPEND_RUN, params, fence.run_id)
            _check_outcome(outcome, fence.run_id, fence.epoch, "")
        except BaseException as exc:
            if then is not None:
                then(exc)
            raise
        if then is not None:
            then(None)

    async def complete_run(self, fence: Fence, result: bytes, *, now: float) -> None:
        outcome = await self._call(
            SQL_FN_FINISH_RUN, (fence.run_id, fence.epoch, result, None, now), fence.run_id
        )
        _check_outcome(outcome, fence.run_id, fence.epoch, "")

    async def fail_run(self, fence: Fence, error: bytes, *, now: float) -> None:
        outcome = await self._call(
            SQL_FN_FINISH_RUN, (fence.run_id, fence.epoch, None, error, now), fence.run_id
        )
        _check_outcome(outcome, fence.run_id, fence.epoch, "")

    # -- decisions -------------------------------------------------------------------------------

    async def get_wait_by_token(self, token_digest: bytes) -> WaitRecord | None:
        rows = await self._fetch(SQL_WAIT_BY_TOKEN, {"digest": token_digest})
        return wait_from_row(rows[0]) if rows else None

    async def get_wait(self, wait_id: str) -> WaitRecord | None:
        rows = await self._fetch(SQL_WAIT_BY_ID, (wait_id,))
        return wait_from_row(rows[0]) if rows else None

    async def list_waits(
        self,
        *,
        status: WaitStatus | None = WaitStatus.PENDING,
        kinds: Sequence[WaitKind] | None = None,
        limit: int = 100,
    ) -> list[WaitRecord]:
        sql, params = list_waits_sql(status, kinds)
        return [wait_from_row(r) for r in await self._fetch(sql, (*params, limit))]

    async def resolve_wait(
        self,
        *,
        token_digest: bytes | None = None,
        wait_id: str | None = None,
        payload: bytes,
        now: float,
        check: Callable[[WaitRecord], None] | None = None,
        also: Callable[[Any], None] | None = None,
    ) -> WaitRecord:
        by_token = also is None  # a caller's write joins a decision by id
        wait, decided = await self._wait_to_decide(
            token_digest, wait_id, payload, now, check, None, by_token=by_token
        )
        if decided is not None:
            return wait
        params = (wait.id, wait.run_id, payload, now)
        if also is None:
            outcome = await self._call(SQL_FN_RESOLVE_WAIT, params, wait.run_id)
        else:
            # The caller's write joins the decision's transaction: a write function on the same
            # writer instead of a pipelined statement (operators' decisions, not the hot path).
            def tx(conn: PgConnection) -> str:
                row = conn.execute(SQL_FN_RESOLVE_WAIT, params).fetchone()
                decided = str(row[0]) if row is not None else "missing"
                if decided == "ok":
                    also(conn)
                return decided

            outcome = await self._writer.write(tx)
        return _decided(wait, outcome, payload, now, token_digest, wait_id)

    async def resolve_wait_and_claim(
        self,
        *,
        token_digest: bytes,
        payload: bytes,
        now: float,
        check: Callable[[WaitRecord], None] | None,
        owner: str,
        lease_ttl: float,
        max_crashes: int,
        abandoned: Callable[[Claim], None] | None = None,
    ) -> tuple[WaitRecord, Claim | None]:
        # One statement (migration 0017): the decision, the woken run's claim for ``owner`` with
        # its state, and a NOTIFY only when the run is left for another runtime to take; with the
        # wait's lookup by token too when it can (0021, see _wait_to_decide).
        claiming = (owner, lease_ttl, max_crashes)
        lost = None if abandoned is None else _claimed(abandoned, 1 + TOKEN_WAIT_COLUMNS)
        wait, rows = await self._wait_to_decide(token_digest, None, payload, now, check, claiming, lost)
        claim_at = 1 + TOKEN_WAIT_COLUMNS  # the outcome and the wait's columns come first
        if rows is None:
            params = (wait.id, wait.run_id, payload, now, *claiming)
            lost = None if abandoned is None else _claimed(abandoned, 1)
            rows = await self._fetch(SQL_FN_RESOLVE_WAIT_AND_CLAIM, params, wait.run_id, lost)
            wait = _decided(wait, str(rows[0][0]) if rows else "missing", payload, now, token_digest, None)
            claim_at = 1
        claim = _claim_in(rows, claim_at)
        return wait, claim

    async def _wait_to_decide(
        self,
        token_digest: bytes | None,
        wait_id: str | None,
        payload: bytes,
        now: float,
        check: Callable[[WaitRecord], None] | None,
        claiming: tuple[str, float, int] | None,
        abandoned: Callable[[Rows], None] | None = None,
        by_token: bool = True,
    ) -> tuple[WaitRecord, Sequence[Sequence[Any]] | None]:
        """The wait a decision is for, refused as the decision would be (an approval, already
        resolved; ``check``, the payload's schema, sees it before anything is written), and None;
        the decision's statement then locks the run and reads the wait again (migrations 0004,
        0017): a racing decision or expiry that committed first wins.

        By token (unless ``by_token`` is False), with no deferred statement of this store that
        the run's decision would have to carry: the lookup and the decision in one statement
        (migration 0021), the claim too with ``claiming`` (owner, lease seconds, crash limit);
        then the wait as decided and the statement's rows (the outcome, the wait's columns, the
        claim's), or the wait to decide by id as above when it has a schema to check first or
        its run was locked elsewhere (nothing written). Sent after the statements of its group
        that are sorted by run (``LOCKS_LAST``): it never waits for a lock. ``abandoned(rows)``:
        the statement's, if its caller is cancelled while it is in flight."""
        if token_digest is not None and by_token and not self._deferred:
            params = (token_digest, payload, now, *(claiming or (None, None, None)))
            rows = await self._submit(SQL_FN_RESOLVE_TOKEN, params, LOCKS_LAST, (), abandoned)
            outcome = str(rows[0][0])
            if outcome == "unknown":
                raise hook_not_found(token_digest, None)
            wait = wait_from_row(rows[0][1 : 1 + TOKEN_WAIT_COLUMNS])
            if outcome not in ("terms", "busy"):
                return _decided(wait, outcome, payload, now, token_digest, None), rows
            return _screened(wait, now, check), None
        if token_digest is not None:
            rows = await self._fetch(SQL_WAIT_BY_TOKEN, {"digest": token_digest})
        else:
            rows = await self._fetch(SQL_WAIT_BY_ID, (wait_id,))
        if not rows:
            raise hook_not_found(token_digest, wait_id)
        return _screened(wait_from_row(rows[0]), now, check), None

    async def expire_due_waits(self, *, now: float, limit: int = 500) -> int:
        # One statement (migration 0003): runs locked in id order, so two sweepers never wait on
        # each other in a cycle; it may lock several runs, so it runs alone, not in a group.
        rows = await self._alone(SQL_FN_EXPIRE_DUE_WAITS, (now, limit))
        return int(rows[0][0])
