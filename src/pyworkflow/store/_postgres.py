"""The PostgreSQL store: psycopg 3, for more than one machine.

Every transition is one transaction. Nearly all are one statement each (a new run: one statement
with CTEs; a turn's step result, checkpoint, wait, suspension and end, a decision, a Celery turn's
claim, a runtime's tick and the sweeper's expiry: server-side functions from migrations
0002-0004), and those, with the single-statement reads, go through a **group commit** (the
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
multi-statement transitions (a failed step, a cancellation, a release, a checkpoint deletion, the
statement-by-statement claim, heartbeats) keep their own transactions on a small async pool.

A run's ``runs`` row is its lock: each transaction that changes a run takes ``SELECT ... FOR
UPDATE`` on it first (claims take it with ``SKIP LOCKED``) and then changes that run's rows, so
transitions of one run serialize and the epoch read by a fenced write cannot change before it
commits. Transactions that lock several runs lock them in run id order: a group is sorted by run
id (reads, which lock nothing, first), the sweeper's expiry goes in run id order, and the
multi-row lease updates (heartbeat, freeing dead owners' leases), which touch queue rows without
their runs' locks, lock those rows in run id order too. Statements that may lock several runs in
another order (a runtime's ``poll``, the expiry) run alone, never in a group. So transactions
never wait on each other in a cycle. A transaction that makes a run due sends ``NOTIFY
pyworkflow_queue`` (delivered at commit, once per transaction); :meth:`PostgresStore.subscribe`
listens.

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

from .._errors import (
    CancellationError,
    CheckpointConflictError,
    HookExpiredError,
    HookNotFoundError,
    LeaseLostError,
    StepAlreadyCompletedError,
    WorkflowNotFoundError,
)
from ._migrations import Migration, load_migrations
from ._pg_db import PostgresDatabase
from ._protocol import (
    CheckpointRecord,
    Claim,
    Event,
    Fence,
    NewWait,
    Poll,
    RunRecord,
    RunState,
    RunStatus,
    StepRecord,
    StepStatus,
    WaitKind,
    WaitRecord,
    WaitStatus,
)
from ._rows import RUN_COLUMNS, WAIT_COLUMNS, list_waits_sql, raise_if_resolved, run_from_row, wait_from_row

T = TypeVar("T")
Conn = psycopg.AsyncConnection[Any]
Rows = list[tuple[Any, ...]]
log = logging.getLogger("pyworkflow.store.postgres")

#: The channel a transaction that makes work due notifies (payload empty, so one per commit).
CHANNEL = "pyworkflow_queue"


def pyworkflow_migrations() -> list[Migration]:
    return load_migrations("pyworkflow.store.migrations", "postgres", "pyworkflow")


# -- SQL, one statement per purpose ------------------------------------------------------------

# The run's lock, and the fence of a turn in the same round trip (queue row may be gone).
SQL_LOCK_RUN = """
SELECT r.status, q.epoch FROM runs r LEFT JOIN queue q ON q.run_id = r.id WHERE r.id = %s FOR UPDATE OF r
"""
# Next event number of a run: the primary key makes MAX(seq) one index probe; the run lock held
# by the caller makes it race-free.
SQL_APPEND_EVENT = """
INSERT INTO events (run_id, seq, at, type, key, data)
VALUES (%(run)s, (SELECT COALESCE(MAX(seq), 0) + 1 FROM events WHERE run_id = %(run)s), %(at)s, %(type)s,
        %(key)s, %(data)s)
"""
# A new run, its queue row (optionally leased at once to the process that starts it) and its
# first event, in one statement (so one round trip, no BEGIN/COMMIT); NOTIFY when nobody holds it.
SQL_CREATE_RUN = """
WITH r AS (
    INSERT INTO runs (id, workflow, status, input, created_at, updated_at)
    VALUES (%(run)s, %(workflow)s, %(status)s, %(input)s, %(now)s, %(now)s)
), q AS (
    INSERT INTO queue (run_id, available_at, wake_seq, epoch, lease_owner, lease_expires_at)
    VALUES (%(run)s, %(now)s, 0, %(epoch)s, %(owner)s, %(expires)s)
), e AS (
    INSERT INTO events (run_id, seq, at, type) VALUES (%(run)s, 1, %(now)s, 'run_created')
)
SELECT pg_notify('pyworkflow_queue', '') WHERE %(notify)s
"""
SQL_NOTIFY = f"NOTIFY {CHANNEL}"
SQL_SET_RUN_STATUS = "UPDATE runs SET status = %s, updated_at = %s WHERE id = %s"
SQL_FINISH_RUN = """
UPDATE runs SET status = %s, result = %s, error = %s, updated_at = %s, finished_at = %s WHERE id = %s
"""
# Give a lease back (release): the row stays, unleased and due now.
SQL_UNLEASE = """
UPDATE queue SET lease_owner = NULL, lease_expires_at = NULL, available_at = %s WHERE run_id = %s
"""
SQL_DELETE_QUEUE = "DELETE FROM queue WHERE run_id = %s"
# Due rows nobody holds (never leased, released, or whose lease ran out), locked with their run;
# rows another claimer or a transition holds are skipped, not waited for.
SQL_CLAIMABLE = """
SELECT q.run_id, q.epoch, q.wake_seq, q.lease_owner, q.crashes, r.workflow, r.input, r.status
FROM queue q JOIN runs r ON r.id = q.run_id
WHERE q.available_at <= %(now)s AND (q.lease_expires_at IS NULL OR q.lease_expires_at < %(now)s)
ORDER BY q.available_at
LIMIT %(limit)s
FOR UPDATE OF q, r SKIP LOCKED
"""
# Runs a claim would take: unleased rows that became due between %(after)s and %(due)s, and rows
# whose lease ran out.
SQL_READY_IDS = """
SELECT run_id FROM queue
WHERE (lease_owner IS NULL AND available_at <= %(due)s AND available_at >= %(after)s)
   OR (lease_owner IS NOT NULL AND lease_expires_at < %(now)s AND available_at <= %(now)s)
ORDER BY available_at LIMIT %(limit)s
"""
SQL_ANY_READY = """
SELECT 1 FROM queue WHERE available_at <= %(now)s AND (lease_expires_at IS NULL OR lease_expires_at < %(now)s)
LIMIT 1
"""
SQL_LEASE = """
UPDATE queue SET epoch = epoch + 1, lease_owner = %s, lease_expires_at = %s, crashes = %s WHERE run_id = %s
"""
# Several queue rows at once: locked in run id order first (the order groups lock runs in), so a
# heartbeat never waits in a cycle with a group that holds some of the same runs.
SQL_HEARTBEAT = """
UPDATE queue SET lease_expires_at = %(expires)s
WHERE run_id IN (SELECT run_id FROM queue WHERE lease_owner = %(owner)s ORDER BY run_id FOR UPDATE)
  AND lease_owner = %(owner)s
"""
SQL_EXPIRE_LEASES = """
UPDATE queue SET lease_expires_at = %(expires)s
WHERE run_id IN (SELECT run_id FROM queue WHERE lease_owner = ANY(%(owners)s) ORDER BY run_id FOR UPDATE)
  AND lease_owner = ANY(%(owners)s)
"""
SQL_LEASE_OWNERS = """
SELECT DISTINCT lease_owner FROM queue WHERE lease_owner IS NOT NULL AND lease_expires_at >= %s
"""
SQL_NEXT_DUE = """
SELECT LEAST(
    (SELECT MIN(COALESCE(lease_expires_at, available_at)) FROM queue),
    (SELECT MIN(expires_at) FROM waits WHERE status = 'pending' AND expires_at IS NOT NULL))
"""
SQL_STEP = "SELECT status FROM steps WHERE run_id = %s AND step_key = %s"
SQL_UPSERT_STEP = """
INSERT INTO steps (run_id, step_key, status, attempt, result, error, delivered, updated_at)
VALUES (%(run)s, %(key)s, %(status)s, %(attempt)s, %(result)s, %(error)s, %(delivered)s, %(now)s)
ON CONFLICT (run_id, step_key) DO UPDATE SET
    status = EXCLUDED.status, attempt = EXCLUDED.attempt, result = EXCLUDED.result, error = EXCLUDED.error,
    delivered = GREATEST(steps.delivered, EXCLUDED.delivered), updated_at = EXCLUDED.updated_at
"""
SQL_DELETE_CHECKPOINT = "DELETE FROM checkpoints WHERE run_id = %s AND scope = %s AND name = %s"
SQL_WAIT_BY_KEY = f"SELECT {WAIT_COLUMNS} FROM waits WHERE run_id = %s AND wait_key = %s"
SQL_WAIT_BY_ID = f"SELECT {WAIT_COLUMNS} FROM waits WHERE id = %s"
# A wait by its first token or by one handed out again later (wait_tokens).
SQL_WAIT_BY_TOKEN = f"""
SELECT {WAIT_COLUMNS} FROM waits WHERE token_digest = %(digest)s
UNION ALL
SELECT {WAIT_COLUMNS} FROM waits WHERE id = (SELECT wait_id FROM wait_tokens WHERE token_digest = %(digest)s)
LIMIT 1
"""
SQL_INSERT_WAIT = """
INSERT INTO waits (id, run_id, wait_key, kind, name, step_key, token_digest, status, created_at, expires_at,
                   payload_schema)
VALUES (%s, %s, %s, %s, %s, %s, %s, 'pending', %s, %s, %s)
"""
SQL_INSERT_WAIT_TOKEN = "INSERT INTO wait_tokens (token_digest, wait_id) VALUES (%s, %s)"
SQL_CANCEL_WAITS = """
UPDATE waits SET status = 'cancelled', resolved_at = %s WHERE run_id = %s AND status = 'pending'
"""
# A run's state in one statement (one snapshot, one round trip): each row is a step (columns
# 1-6), a wait (7-19) or a checkpoint (20-23), told apart by column 0.
_STEP_COLUMNS = "step_key, status, attempt, result, error, delivered"
_CHECKPOINT_COLUMNS = "scope, name, value, revision"
# Typed NULLs: UNION resolves column types pairwise, left to right.
_NULLS_STEP = "NULL::text, NULL::text, NULL::integer, NULL::bytea, NULL::bytea, NULL::integer"
_NULLS_WAIT = (
    "NULL::text, NULL::text, NULL::text, NULL::text, NULL::text, NULL::text, NULL::text, NULL::boolean,"
    " NULL::double precision, NULL::double precision, NULL::double precision, NULL::bytea, NULL::bytea"
)
_NULLS_CHECKPOINT = "NULL::text, NULL::text, NULL::bytea, NULL::integer"
SQL_STATE = f"""
SELECT 1, {_STEP_COLUMNS}, {_NULLS_WAIT}, {_NULLS_CHECKPOINT} FROM steps WHERE run_id = %(run)s
UNION ALL
SELECT 2, {_NULLS_STEP}, {WAIT_COLUMNS}, {_NULLS_CHECKPOINT} FROM waits WHERE run_id = %(run)s
UNION ALL
SELECT 3, {_NULLS_STEP}, {_NULLS_WAIT}, {_CHECKPOINT_COLUMNS} FROM checkpoints WHERE run_id = %(run)s
"""
SQL_GET_RUN = f"SELECT {RUN_COLUMNS} FROM runs WHERE id = %s"
SQL_EVENTS = """
SELECT run_id, seq, at, type, key, data FROM events WHERE run_id = %s AND seq > %s ORDER BY seq LIMIT %s
"""

# The hot turn writes, one statement each (migration 0002): they return 'ok' or why they refused.
SQL_FN_COMPLETE_STEP = "SELECT pyworkflow_complete_step(%s, %s, %s, %s, %s)"
SQL_FN_SAVE_CHECKPOINT = "SELECT pyworkflow_save_checkpoint(%s, %s, %s, %s, %s, %s, %s)"
SQL_FN_SUSPEND_RUN = "SELECT pyworkflow_suspend_run(%s, %s, %s, %s::text[], %s::text[], %s::integer[], %s)"
SQL_FN_FINISH_RUN = "SELECT pyworkflow_finish_run(%s, %s, %s, %s, %s)"
# The runtime's tick (migration 0003): claims, then a row with c_run NULL carrying the next due time.
SQL_FN_POLL = """
SELECT c_run, c_epoch, c_wake_seq, c_workflow, c_input, c_resumed, c_next_due
FROM pyworkflow_poll(%s::text, %s::integer, %s::double precision, %s::double precision, %s::integer)
"""
SQL_FN_CREATE_WAIT = "SELECT pyworkflow_create_wait(%s, %s, %s, %s, %s, %s, %s, %s, %s, %s, %s)"
SQL_FN_EXPIRE_DUE_WAITS = "SELECT pyworkflow_expire_due_waits(%s::double precision, %s::integer)"
# A decision and a Celery turn's claim (migration 0004).
SQL_FN_RESOLVE_WAIT = "SELECT pyworkflow_resolve_wait(%s, %s, %s, %s)"
SQL_FN_CLAIM_RUN = """
SELECT c_run, c_epoch, c_wake_seq, c_workflow, c_input, c_resumed
FROM pyworkflow_claim_run(%s::text, %s::text, %s::double precision, %s::double precision, %s::integer)
"""

_CRASHED = (
    b'{"type":"pyworkflow.WorkerCrashed","message":"the worker running this run died %d times;'
    b' giving up (max_crashes)"}'
)


async def _event(conn: Conn, run_id: str, now: float, type_: str, key: str | None = None,
                 data: bytes | None = None) -> None:  # fmt: skip
    await conn.execute(SQL_APPEND_EVENT, {"run": run_id, "at": now, "type": type_, "key": key, "data": data})


async def _lock_run(conn: Conn, run_id: str) -> tuple[RunStatus, int | None] | None:
    """Take the run's lock; return its status and its queue row's epoch (None: no queue row)."""
    cur = await conn.execute(SQL_LOCK_RUN, (run_id,))
    row = await cur.fetchone()
    return (RunStatus(row[0]), row[1]) if row is not None else None


async def _check_fence(conn: Conn, fence: Fence) -> None:
    locked = await _lock_run(conn, fence.run_id)
    if locked is None or locked[1] != fence.epoch:
        if locked is not None and locked[0] == RunStatus.CANCELLED:
            raise CancellationError(f"run {fence.run_id} was cancelled")
        raise LeaseLostError(f"run {fence.run_id}: lease epoch {fence.epoch} is no longer current")


async def _affected(conn: Conn, sql: str, params: Any) -> int:
    """Rows a DML statement changed. Transactions run in pipeline mode, where ``rowcount`` is not
    known before a sync: the statement returns a row per change instead (``RETURNING 1``)."""
    cur = await conn.execute(sql + " RETURNING 1", params)
    return len(await cur.fetchall())


async def _insert_wait(conn: Conn, run_id: str, wait: NewWait, now: float) -> WaitRecord:
    await conn.execute(
        SQL_INSERT_WAIT,
        (wait.id, run_id, wait.wait_key, str(wait.kind), wait.name, wait.step_key, wait.token_digest, now,
         wait.expires_at, wait.payload_schema),
    )  # fmt: skip
    await _event(conn, run_id, now, "wait_created", wait.wait_key)
    return WaitRecord(
        wait.id, run_id, wait.wait_key, wait.kind, wait.name, wait.step_key, WaitStatus.PENDING, False, now,
        wait.expires_at, None, None, wait.payload_schema,
    )  # fmt: skip


async def _claim_row(
    conn: Conn, row: Sequence[Any], owner: str, now: float, lease_ttl: float, max_crashes: int
) -> Claim | None:
    """Lease one locked claimable row, or fail its run when its workers died too often."""
    run_id, epoch, wake_seq, previous_owner, crashes, workflow, input_, status = row
    if RunStatus(status).is_terminal:
        await conn.execute(SQL_DELETE_QUEUE, (run_id,))
        return None
    if previous_owner is not None:  # a turn that never ended: its worker died
        crashes += 1
        if crashes > max_crashes:
            error = _CRASHED % crashes
            await conn.execute(SQL_FINISH_RUN, (str(RunStatus.FAILED), None, error, now, now, run_id))
            await conn.execute(SQL_CANCEL_WAITS, (now, run_id))
            await conn.execute(SQL_DELETE_QUEUE, (run_id,))
            await _event(conn, run_id, now, "run_failed", None, error)
            return None
    await conn.execute(SQL_LEASE, (owner, now + lease_ttl, crashes, run_id))
    await conn.execute(SQL_SET_RUN_STATUS, (str(RunStatus.RUNNING), now, run_id))
    await _event(conn, run_id, now, "run_resumed" if previous_owner is None else "run_recovered")
    fresh = status == RunStatus.PENDING
    return Claim(Fence(run_id, epoch + 1, wake_seq), workflow, input_, resumed=not fresh)


class PostgresStore:
    """:class:`~pyworkflow.store.Store` on PostgreSQL (psycopg 3: the pipelined group commit of a
    :class:`~pyworkflow.store.PostgresDatabase` with two writers for the single-statement
    transitions and reads, an ``AsyncConnectionPool`` for the others)."""

    def __init__(self, url: str, *, min_size: int = 1, max_size: int = 16) -> None:
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
        )
        self._closed = False
        self._listeners: list[Callable[[], None]] = []
        self._listener_task: asyncio.Task[None] | None = None
        self._inflight: set[asyncio.Task[Any]] = set()
        self._loop = asyncio.new_event_loop()
        self._thread = threading.Thread(
            target=self._loop.run_forever, name="pyworkflow-postgres", daemon=True
        )
        self._thread.start()
        self._pool: AsyncConnectionPool[Conn] = asyncio.run_coroutine_threadsafe(
            self._open_pool(min_size, max_size), self._loop
        ).result()

    async def _open_pool(self, min_size: int, max_size: int) -> AsyncConnectionPool[Conn]:
        pool: AsyncConnectionPool[Conn] = AsyncConnectionPool(
            self.url, min_size=min_size, max_size=max_size, kwargs={"autocommit": True}, open=False
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
                return await fn(conn)

        return await self._on_loop(run())

    def _submit(self, sql: str, params: Any, key: str | None) -> asyncio.Future[Rows]:
        """Hand one statement to the group commit; the future settles after its transaction ended.
        A caller that is cancelled stops waiting; the statement still runs to its commit."""
        if self._closed:
            raise RuntimeError("store is closed")
        return self._writer.submit(sql, params, key)

    async def _call(self, sql: str, params: Any, run_id: str) -> str:
        """One statement that is a whole transition of ``run_id`` (a server-side function that
        locks that run first), committed in a group; its outcome."""
        rows = await self._submit(sql, params, run_id)
        return str(rows[0][0])

    async def _fetch(self, sql: str, params: Any, run_id: str = "") -> Rows:
        """One statement's rows: a read (no lock, ``run_id`` empty) or a transition of ``run_id``."""
        return await self._submit(sql, params, run_id)

    async def _alone(self, sql: str, params: Any) -> Rows:
        """One statement that may lock several runs in any order: its own transaction, never in a group."""
        return await self._submit(sql, params, None)

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
        await self._fetch(SQL_CREATE_RUN, params, run_id)  # one statement, committed in a group
        if not lease_owner:
            return None
        return Claim(Fence(run_id, epoch, 0), workflow, input, resumed=False)

    async def get_run(self, run_id: str) -> RunRecord | None:
        rows = await self._fetch(SQL_GET_RUN, (run_id,))
        return run_from_row(rows[0]) if rows else None

    async def list_runs(
        self, *, status: RunStatus | None = None, workflow: str | None = None, limit: int = 100
    ) -> list[RunRecord]:
        clauses, params = [], []
        if status is not None:
            clauses.append("status = %s")
            params.append(str(status))
        if workflow is not None:
            clauses.append("workflow = %s")
            params.append(workflow)
        where = f"WHERE {' AND '.join(clauses)}" if clauses else ""
        sql = f"SELECT {RUN_COLUMNS} FROM runs {where} ORDER BY created_at DESC LIMIT %s"
        return [run_from_row(r) for r in await self._fetch(sql, (*params, int(limit)))]

    async def get_events(self, run_id: str, *, after_seq: int = 0, limit: int = 10_000) -> list[Event]:
        return [Event(*r) for r in await self._fetch(SQL_EVENTS, (run_id, after_seq, limit))]

    async def load_state(self, run_id: str) -> RunState:
        state = RunState()
        for r in await self._fetch(SQL_STATE, {"run": run_id}):
            if r[0] == 1:
                state.steps[r[1]] = StepRecord(r[1], StepStatus(r[2]), r[3], r[4], r[5], r[6])
            elif r[0] == 2:
                w = wait_from_row(r[7:20])
                state.waits[w.wait_key] = w
            else:
                state.checkpoints[(r[20], r[21])] = CheckpointRecord(r[20], r[21], r[22], r[23])
        return state

    async def cancel_run(self, run_id: str, *, now: float) -> bool:
        async def tx(conn: Conn) -> bool:
            locked = await _lock_run(conn, run_id)
            if locked is None:
                raise WorkflowNotFoundError(f"no run {run_id!r}")
            if locked[0].is_terminal:
                return False
            await conn.execute(SQL_FINISH_RUN, (str(RunStatus.CANCELLED), None, None, now, now, run_id))
            await conn.execute(SQL_CANCEL_WAITS, (now, run_id))
            await conn.execute(SQL_DELETE_QUEUE, (run_id,))
            await _event(conn, run_id, now, "run_cancelled")
            return True

        return await self._tx(tx)

    # -- the queue -------------------------------------------------------------------------------

    async def has_ready(self, *, now: float) -> bool:
        return bool(await self._fetch(SQL_ANY_READY, {"now": now}))

    async def claim(
        self, owner: str, *, limit: int, now: float, lease_ttl: float, max_crashes: int
    ) -> list[Claim]:
        async def tx(conn: Conn) -> list[Claim]:
            cur = await conn.execute(SQL_CLAIMABLE, {"now": now, "limit": limit})
            claims: list[Claim] = []
            for row in await cur.fetchall():
                claim = await _claim_row(conn, row, owner, now, lease_ttl, max_crashes)
                if claim is not None:
                    claims.append(claim)
            return claims

        return await self._tx(tx)

    async def claim_run(
        self, run_id: str, owner: str, *, now: float, lease_ttl: float, max_crashes: int
    ) -> Claim | None:
        """Lease this run if it is due and nobody holds it (the Celery runtime's turn); else None.
        Not part of :class:`~pyworkflow.store.Store` (yet)."""

        rows = await self._fetch(SQL_FN_CLAIM_RUN, (run_id, owner, now, lease_ttl, max_crashes), run_id)
        if not rows:
            return None
        _, epoch, wake_seq, workflow, input_, resumed = rows[0]
        return Claim(Fence(run_id, epoch, wake_seq), workflow, input_, resumed=resumed)

    async def ready_runs(
        self,
        *,
        now: float,
        due_before: float | None = None,
        due_after: float | None = None,
        limit: int = 1000,
    ) -> list[str]:
        """Ids of runs a claim would take: unleased ones that became due between ``due_after`` and
        ``due_before`` (default: any time up to ``now``) and those whose lease ran out. The Celery
        sweeper publishes turns for them. Not part of :class:`~pyworkflow.store.Store` (yet)."""
        due = now if due_before is None else due_before
        after = float("-inf") if due_after is None else due_after
        rows = await self._fetch(SQL_READY_IDS, {"now": now, "due": due, "after": after, "limit": limit})
        return [r[0] for r in rows]

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
        rows = await self._fetch(SQL_NEXT_DUE, None)
        value = rows[0][0] if rows else None
        return float(value) if value is not None else None

    async def poll(self, owner: str, *, limit: int, now: float, lease_ttl: float, max_crashes: int) -> Poll:
        rows = await self._alone(SQL_FN_POLL, (owner, max(limit, 0), now, lease_ttl, max_crashes))
        claims: list[Claim] = []
        due: float | None = None
        for run_id, epoch, wake_seq, workflow, input_, resumed, next_due in rows:
            if run_id is None:
                due = float(next_due) if next_due is not None else None
            else:
                claims.append(Claim(Fence(run_id, epoch, wake_seq), workflow, input_, resumed=resumed))
        return Poll(claims, due)

    async def release(self, fence: Fence, *, now: float) -> None:
        async def tx(conn: Conn) -> None:
            locked = await _lock_run(conn, fence.run_id)
            if locked is not None and locked[1] == fence.epoch:
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

        await self._tx(tx)

    async def save_checkpoint(
        self, fence: Fence, scope: str, name: str, value: bytes, *, expected_revision: int | None, now: float
    ) -> int:
        outcome = await self._call(
            SQL_FN_SAVE_CHECKPOINT,
            (fence.run_id, fence.epoch, scope, name, value, expected_revision, now),
            fence.run_id,
        )
        if outcome.startswith("conflict:"):
            current = int(outcome.split(":", 1)[1])
            raise CheckpointConflictError(
                f"checkpoint {name!r} is at revision {current}, not {expected_revision}",
                current_revision=current,
            )
        return int(_check_outcome(outcome, fence.run_id, fence.epoch, name or scope))

    async def delete_checkpoint(self, fence: Fence, scope: str, name: str, *, now: float) -> bool:
        async def tx(conn: Conn) -> bool:
            await _check_fence(conn, fence)
            deleted = await _affected(conn, SQL_DELETE_CHECKPOINT, (fence.run_id, scope, name)) > 0
            if deleted:
                key = f"{scope}/{name}" if name else scope
                await _event(conn, fence.run_id, now, "checkpoint_deleted", key)
            return deleted

        return await self._tx(tx)

    async def create_wait(self, fence: Fence, wait: NewWait, *, now: float) -> WaitRecord:
        outcome = await self._call(
            SQL_FN_CREATE_WAIT,
            (fence.run_id, fence.epoch, wait.id, wait.wait_key, str(wait.kind), wait.name, wait.step_key,
             wait.token_digest, wait.expires_at, wait.payload_schema, now),
            fence.run_id,
        )  # fmt: skip
        if outcome == "exists":
            rows = await self._fetch(SQL_WAIT_BY_KEY, (fence.run_id, wait.wait_key))
            return wait_from_row(rows[0])
        _check_outcome(outcome, fence.run_id, fence.epoch, wait.wait_key)
        return WaitRecord(
            wait.id, fence.run_id, wait.wait_key, wait.kind, wait.name, wait.step_key, WaitStatus.PENDING,
            False, now, wait.expires_at, None, None, wait.payload_schema,
        )  # fmt: skip

    async def add_wait_token(self, fence: Fence, wait_id: str, token_digest: bytes) -> None:
        async def tx(conn: Conn) -> None:
            await _check_fence(conn, fence)
            await conn.execute(SQL_INSERT_WAIT_TOKEN, (token_digest, wait_id))

        await self._tx(tx)

    async def suspend_run(
        self, fence: Fence, *, notified: Sequence[str], delivered: dict[str, int], now: float
    ) -> None:
        outcome = await self._call(
            SQL_FN_SUSPEND_RUN,
            (fence.run_id, fence.epoch, fence.wake_seq, list(notified), list(delivered),
             list(delivered.values()), now),
            fence.run_id,
        )  # fmt: skip
        _check_outcome(outcome, fence.run_id, fence.epoch, "")

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

        sql, params = list_waits_sql(status, kinds, "%s")
        return [wait_from_row(r) for r in await self._fetch(sql, (*params, limit))]

    async def resolve_wait(
        self,
        *,
        token_digest: bytes | None = None,
        wait_id: str | None = None,
        payload: bytes,
        now: float,
        check: Callable[[WaitRecord], None] | None = None,
    ) -> WaitRecord:
        # Find the wait (no lock), then record the decision with one statement that locks its run
        # and reads the wait again (migration 0004): a racing decision or expiry that committed
        # first wins. ``check`` (the payload's schema) sees the wait before anything is written.
        if token_digest is not None:
            rows = await self._fetch(SQL_WAIT_BY_TOKEN, {"digest": token_digest})
        else:
            rows = await self._fetch(SQL_WAIT_BY_ID, (wait_id,))
        if not rows:
            raise HookNotFoundError("no hook has this token" if token_digest else f"no hook {wait_id!r}")
        wait = wait_from_row(rows[0])
        raise_if_resolved(wait)
        if check is not None and (wait.expires_at is None or wait.expires_at > now):
            check(wait)
        outcome = await self._call(SQL_FN_RESOLVE_WAIT, (wait.id, wait.run_id, payload, now), wait.run_id)
        if outcome == "missing":
            raise HookNotFoundError("no hook has this token" if token_digest else f"no hook {wait_id!r}")
        if outcome.startswith("resolved:"):
            wait.status = WaitStatus(outcome.split(":", 1)[1])
            raise_if_resolved(wait)
        if outcome == "expired":
            raise HookExpiredError(f"hook {wait.name!r} expired before the payload arrived", wait_id=wait.id)
        if outcome != "ok":
            raise RuntimeError(f"unexpected outcome {outcome!r} of a decision")
        wait.status, wait.payload, wait.resolved_at = WaitStatus.RECEIVED, payload, now
        return wait

    async def expire_due_waits(self, *, now: float, limit: int = 500) -> int:
        # One statement (migration 0003): runs locked in id order, so two sweepers never wait on
        # each other in a cycle; it may lock several runs, so it runs alone, not in a group.
        rows = await self._alone(SQL_FN_EXPIRE_DUE_WAITS, (now, limit))
        return int(rows[0][0])


def _check_outcome(outcome: str, run_id: str, epoch: int, what: str) -> str:
    """Raise the error a server-side turn write reported; return its value (after ``ok:``)."""
    if outcome == "ok" or outcome.startswith("ok:"):
        return outcome[3:]
    if outcome == "cancelled":
        raise CancellationError(f"run {run_id} was cancelled")
    if outcome == "lease_lost":
        raise LeaseLostError(f"run {run_id}: lease epoch {epoch} is no longer current")
    if outcome == "has_result":
        raise StepAlreadyCompletedError(f"step {what!r} of run {run_id} already has a result")
    raise RuntimeError(f"unexpected outcome {outcome!r} of a turn write")


async def _refuse_second_result(conn: Conn, run_id: str, step_key: str) -> None:
    row = await (await conn.execute(SQL_STEP, (run_id, step_key))).fetchone()
    if row is not None and row[0] in (StepStatus.COMPLETED, StepStatus.FAILED):
        raise StepAlreadyCompletedError(f"step {step_key!r} of run {run_id} already has a result")
