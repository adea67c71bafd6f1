"""The embedded SQLite store: every transition is a function run by the group-commit writer of
:class:`SQLiteDatabase`, the hottest of them one statement each (``_sqlite_statements``); reads
use this thread's reader connection and indexed lookups only."""

from __future__ import annotations

import logging
import sqlite3
from collections.abc import Callable, Sequence
from typing import Any, cast

from .._errors import (
    ConfigurationError,
    StepAlreadyCompletedError,
    WorkflowNotFoundError,
)
from ._group_commit import WRITE_TIMEOUT
from ._manage import SQL_CANCEL_REASON, retry_run_tx
from ._migrations import Migration
from ._migrations import pyworkflow_migrations as _migrations_of
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
    run_status,
    step_status,
)
from ._remote import wake_run
from ._rows import (
    RUN_COLUMNS,
    SQL_RUN_CURSOR,
    WAIT_COLUMNS,
    cancel_reason,
    checkpoint_written,
    fence_refused,
    hook_not_found,
    list_runs_sql,
    list_waits_sql,
    log_deferred,
    pending_wait,
    raise_checkpoint_refusal,
    raise_if_resolved,
    refuse_approval,
    run_from_row,
    wait_from_row,
)
from ._sqlite_db import SQLiteDatabase, bind_as_is
from ._sqlite_statements import (
    FENCE_REFUSED,
    HAS_RESULT,
    SQL_COMPLETE_STEP,
    SQL_CREATE_RUN,
    SQL_CREATE_WAIT,
    SQL_END_RUN,
    SQL_LEASE,
    SQL_SAVE_CHECKPOINT,
    SQL_SUSPENDED,
    WAIT_EXISTS,
    WRITER_STATEMENTS,
)
from ._url import sqlite_url

log = logging.getLogger("pyworkflow.store")


# The statuses and kinds the store passes as parameters bind as their text, without sqlite3's
# failing adapter lookup (see bind_as_is); str(member) is the value, in C.
for _kind in (RunStatus, WaitStatus, WaitKind, StepStatus):
    bind_as_is(_kind, str)


def pyworkflow_migrations() -> list[Migration]:
    """pyworkflow's SQLite migrations (also ``pyworkflow.store.pyworkflow_migrations("sqlite")``)."""
    return _migrations_of("sqlite")


# -- SQL, one statement per purpose ------------------------------------------------------------

# Next event number of a run: the primary key makes MAX(seq) a single index probe.
SQL_APPEND_EVENT = """
INSERT INTO events (run_id, seq, at, type, key, data)
VALUES (?1, (SELECT COALESCE(MAX(seq), 0) + 1 FROM events WHERE run_id = ?1), ?2, ?3, ?4, ?5)
"""
SQL_FENCE = "SELECT epoch FROM queue WHERE run_id = ?"
SQL_RUN_STATUS = "SELECT status FROM runs WHERE id = ?"
# End a turn: drop the row, while the turn holds it, unless a wake-up arrived during the turn ...
SQL_DELETE_QUEUE_IF_QUIET = "DELETE FROM queue WHERE run_id = ? AND epoch = ? AND wake_seq = ?"
# ... in which case keep it, unleased and due now, for another turn.
SQL_UNLEASE = (
    "UPDATE queue SET lease_owner = NULL, lease_expires_at = NULL, available_at = ? WHERE run_id = ?"
)
SQL_DELETE_QUEUE = "DELETE FROM queue WHERE run_id = ?"
# Due rows nobody holds (never leased, released, or whose lease ran out). Every read of the queue
# here is of pyworkflow's own rows (node_id NULL; a remote run's row is its node's workers'), and
# walks queue_ready (node_id, available_at).
# Each row comes with what the claim needs of its run (by the runs' primary key; NULL for a row
# whose run is gone): one statement, where a read of the run for each row was two more GIL round
# trips for the writer (see _sqlite_statements.py).
_CLAIMABLE = """
SELECT q.run_id, q.epoch, q.wake_seq, q.lease_owner, q.crashes, r.workflow, r.input, r.status
FROM queue q LEFT JOIN runs r ON r.id = q.run_id"""
SQL_READY = f"""{_CLAIMABLE}
WHERE q.node_id IS NULL AND q.available_at <= ?1 AND (q.lease_expires_at IS NULL OR q.lease_expires_at < ?1)
ORDER BY q.available_at LIMIT ?2
"""
# One run's queue row, if it is claimable (SQL_READY's conditions; the primary key serves it).
SQL_READY_RUN = f"""{_CLAIMABLE}
WHERE q.run_id = ?1 AND q.node_id IS NULL AND q.available_at <= ?2
  AND (q.lease_expires_at IS NULL OR q.lease_expires_at < ?2)
"""
SQL_ANY_READY = """
SELECT 1 FROM queue
WHERE node_id IS NULL AND available_at <= ?1 AND (lease_expires_at IS NULL OR lease_expires_at < ?1) LIMIT 1
"""
SQL_HEARTBEAT = "UPDATE queue SET lease_expires_at = ? WHERE lease_owner = ? AND node_id IS NULL"
SQL_EXPIRE_LEASES = "UPDATE queue SET lease_expires_at = ? WHERE lease_owner = ? AND node_id IS NULL"
SQL_LEASE_OWNERS = """
SELECT DISTINCT lease_owner FROM queue
WHERE lease_owner IS NOT NULL AND lease_expires_at >= ? AND node_id IS NULL
"""
# When the queue next has work: the first unleased row by available_at (queue_ready, walking past the
# leased rows) or the first lease to run out (queue_local_leases), whichever is earlier: the minimum of
# COALESCE(lease_expires_at, available_at) without reading every row (migration 0007). The
# indexes are named: without statistics SQLite may otherwise sort every row for the second one.
SQL_NEXT_QUEUE = """
SELECT MIN(t) FROM (
    SELECT * FROM (SELECT available_at AS t FROM queue INDEXED BY queue_ready
                   WHERE node_id IS NULL AND lease_expires_at IS NULL ORDER BY available_at LIMIT 1)
    UNION ALL
    SELECT * FROM (SELECT lease_expires_at AS t FROM queue INDEXED BY queue_local_leases
                   WHERE node_id IS NULL AND lease_expires_at IS NOT NULL ORDER BY lease_expires_at LIMIT 1))
"""
SQL_NEXT_WAIT = "SELECT MIN(expires_at) FROM waits WHERE status = 'pending' AND expires_at IS NOT NULL"
# Both in one statement (the runtime asks after every turn that suspends and every poll_interval
# when idle):
# each scalar subquery keeps its own plan.
SQL_NEXT_DUE = f"SELECT ({SQL_NEXT_QUEUE.strip()}), ({SQL_NEXT_WAIT})"
# Record a step's outcome unless it already has a final one (then nothing changes: rowcount 0).
SQL_UPSERT_STEP = """
INSERT INTO steps (run_id, step_key, status, attempt, result, error, delivered, updated_at)
VALUES (?1, ?2, ?3, ?4, ?5, ?6, ?7, ?8)
ON CONFLICT (run_id, step_key) DO UPDATE SET
    status = ?3, attempt = ?4, result = ?5, error = ?6, delivered = MAX(delivered, ?7), updated_at = ?8
WHERE steps.status NOT IN ('completed', 'failed')
"""
SQL_STEP_PROGRESS = """
INSERT INTO steps (run_id, step_key, status, delivered, updated_at) VALUES (?1, ?2, 'running', ?3, ?4)
ON CONFLICT (run_id, step_key) DO UPDATE SET delivered = MAX(delivered, ?3), updated_at = ?4
"""
SQL_DELETE_CHECKPOINT = "DELETE FROM checkpoints WHERE run_id = ? AND scope = ? AND name = ?"
# A step's checkpoints go with its result (they serve only its re-execution); primary key prefix.
SQL_DELETE_STEP_CHECKPOINTS = "DELETE FROM checkpoints WHERE run_id = ? AND scope = ?"
SQL_WAIT_BY_KEY = f"SELECT {WAIT_COLUMNS} FROM waits WHERE run_id = ? AND wait_key = ?"
SQL_WAIT_BY_ID = f"SELECT {WAIT_COLUMNS} FROM waits WHERE id = ?"
SQL_WAIT_BY_TOKEN = f"SELECT {WAIT_COLUMNS} FROM waits WHERE token_digest = ?"
SQL_WAIT_ID_BY_EXTRA_TOKEN = "SELECT wait_id FROM wait_tokens WHERE token_digest = ?"
SQL_INSERT_WAIT_TOKEN = "INSERT INTO wait_tokens (token_digest, wait_id) VALUES (?, ?)"
SQL_MARK_NOTIFIED = "UPDATE waits SET notified = 1 WHERE id = ?"
# The single transition out of 'pending': whoever updates the row first wins.
SQL_RESOLVE_WAIT = """
UPDATE waits SET status = ?, payload = ?, resolved_at = ? WHERE id = ? AND status = 'pending'
"""
SQL_DUE_WAITS = """
SELECT id, run_id, wait_key, kind FROM waits
WHERE status = 'pending' AND expires_at IS NOT NULL AND expires_at <= ? ORDER BY expires_at LIMIT ?
"""
SQL_STATE_STEPS = "SELECT step_key, status, attempt, result, error, delivered FROM steps WHERE run_id = ?"
SQL_STATE_WAITS = f"SELECT {WAIT_COLUMNS} FROM waits WHERE run_id = ?"
SQL_STATE_CHECKPOINTS = "SELECT scope, name, value, revision FROM checkpoints WHERE run_id = ?"
SQL_GET_RUN = f"SELECT {RUN_COLUMNS} FROM runs WHERE id = ?"
SQL_EVENTS = (
    "SELECT run_id, seq, at, type, key, data FROM events WHERE run_id = ? AND seq > ? ORDER BY seq LIMIT ?"
)


def _event(conn: sqlite3.Connection, run_id: str, now: float, type_: str, key: str | None = None,
           data: bytes | None = None) -> None:  # fmt: skip
    conn.execute(SQL_APPEND_EVENT, (run_id, now, type_, key, data))


def _holds(conn: sqlite3.Connection, fence: Fence) -> bool:
    """Whether the turn of ``fence`` still holds its run (its epoch is the queue row's)."""
    row = conn.execute(SQL_FENCE, (fence.run_id,)).fetchone()
    return row is not None and bool(row[0] == fence.epoch)


def _check_fence(conn: sqlite3.Connection, fence: Fence) -> None:
    if not _holds(conn, fence):
        raise _refused(conn, fence)


def _refused(conn: sqlite3.Connection, fence: Fence) -> Exception:
    """The error of a write whose fence did not hold: the run was cancelled, or the lease lost."""
    status = conn.execute(SQL_RUN_STATUS, (fence.run_id,)).fetchone()
    return fence_refused(
        fence.run_id, fence.epoch, cancelled=status is not None and status[0] == RunStatus.CANCELLED
    )


def _wake(conn: sqlite3.Connection, run_id: str, wait_id: str, now: float) -> str | None:
    """Wake a run after its wait ``wait_id`` left 'pending' (the one rule: :func:`wake_run`)."""
    return wake_run(conn, run_id, wait_id, now)


def _end_turn(conn: sqlite3.Connection, fence: Fence, now: float) -> bool:
    """A turn that waits ends: its queue row is dropped unless a wake-up arrived during the turn.
    Fenced: the deletion checks the epoch itself, and only when it deleted nothing is the fence
    read, to tell a turn that no longer holds the run (refused) from a wake-up (kept, unleased).
    True when the run was left due (the wake-up)."""
    if conn.execute(SQL_DELETE_QUEUE_IF_QUIET, (fence.run_id, fence.epoch, fence.wake_seq)).rowcount:
        return False
    _check_fence(conn, fence)
    conn.execute(SQL_UNLEASE, (now, fence.run_id))
    return True


_END_EVENTS = {
    RunStatus.COMPLETED: "run_completed",
    RunStatus.FAILED: "run_failed",
    RunStatus.CANCELLED: "run_cancelled",
}


def _end_run(conn: sqlite3.Connection, run_id: str, status: RunStatus, result: bytes | None,
             error: bytes | None, now: float, fence: Fence | None = None) -> None:  # fmt: skip
    """End a run (the one rule, for a turn's end, a cancellation and the crash limit): ``status``
    with its result or error, its pending waits cancelled, its queue row and its steps'
    checkpoints deleted, the event; only while ``fence`` holds, if given. One statement
    (``pyworkflow_end_run``, _sqlite_statements.py); PostgreSQL's copy is ``pyworkflow_end_run``
    (migration 0009)."""
    epoch = None if fence is None else fence.epoch
    _transition(conn, SQL_END_RUN, (run_id, epoch, status, result, error, _END_EVENTS[status], now), fence)


def _transition(conn: sqlite3.Connection, sql: str, params: Sequence[Any], fence: Fence | None,
                step_key: str = "") -> bool:  # fmt: skip
    """Run one of the transitions written as a statement (_sqlite_statements.py), its refusals
    raised as the store's errors: the fence did not hold; the step already has a result. False
    when it wrote nothing because the run has a wait of that key already (``WAIT_EXISTS``)."""
    try:
        conn.execute(sql, params)
        return True
    except sqlite3.IntegrityError as exc:
        if str(exc) == WAIT_EXISTS:
            return False
        if fence is not None and str(exc) == FENCE_REFUSED:
            raise _refused(conn, fence) from None
        if fence is not None and str(exc) == HAS_RESULT:
            raise StepAlreadyCompletedError(
                f"step {step_key!r} of run {fence.run_id} already has a result"
            ) from None
        raise


def _crashed(crashes: int) -> bytes:
    """The error of a run failed by the crash limit (the same bytes as PostgreSQL's)."""
    return (
        b'{"type":"pyworkflow.WorkerCrashed","message":"the worker running this run died %d times;'
        b' giving up (max_crashes)"}' % crashes
    )


def _claim_row(conn: sqlite3.Connection, row: Sequence[Any], owner: str, now: float, lease_ttl: float,
               max_crashes: int) -> Claim | None:  # fmt: skip
    """The crash limit and the lease, for one claimable queue row (``SQL_READY``): a finished
    run's leftover row is deleted; a row whose previous lease was never released counts as a
    crash, and past ``max_crashes`` the run is failed with ``pyworkflow.WorkerCrashed`` instead of
    claimed; otherwise the row is leased to ``owner``, with a ``run_recovered`` event after a
    crash or ``run_resumed`` for a suspended run's next turn (none for a pending run's first turn,
    as when ``create_run`` leases the run itself). PostgreSQL's copy of the rule is the
    server-side ``pyworkflow_claim_row`` (migrations 0008, 0014)."""
    run_id, epoch, wake_seq, previous_owner, crashes, workflow, input_, status = row
    if status is None or run_status(status).is_terminal:
        conn.execute(SQL_DELETE_QUEUE, (run_id,))
        return None
    if previous_owner is not None:  # a turn that never ended: its worker died
        crashes += 1
        if crashes > max_crashes:
            _end_run(conn, run_id, RunStatus.FAILED, None, _crashed(crashes), now)
            return None
    fresh = status == RunStatus.PENDING
    # A run's first turn is no resume: its history starts with run_created.
    event = "run_recovered" if previous_owner is not None else None if fresh else "run_resumed"
    conn.execute(SQL_LEASE, (run_id, owner, now + lease_ttl, crashes, event, now))
    # A resumed run's state is read here, in the claim's transaction on the writer's connection,
    # rather than by the runtime's loop afterwards: three reads fewer on the event loop (each
    # gave up the GIL to the writer thread and waited to get it back), and one snapshot.
    state = RunState() if fresh else _read_state(conn, run_id)
    return Claim(Fence(run_id, epoch + 1, wake_seq), workflow, input_, resumed=not fresh, state=state)


def _claimed(abandoned: Callable[[Claim], None], at: int) -> Callable[[Any], None]:
    """A write's ``abandoned`` for a store caller's: its value is a tuple, the claim (or None)
    at ``at``."""

    def hand_over(value: Any) -> None:
        claim = value[at]
        if claim is not None:
            abandoned(claim)

    return hand_over


def _read_state(conn: sqlite3.Connection, run_id: str) -> RunState:
    """Everything replay of ``run_id`` needs: its steps, waits and checkpoints."""
    state = RunState()
    for r in conn.execute(SQL_STATE_STEPS, (run_id,)):
        state.steps[r[0]] = StepRecord(r[0], step_status(r[1]), r[2], r[3], r[4], r[5])
    for r in conn.execute(SQL_STATE_WAITS, (run_id,)):
        w = wait_from_row(r)
        state.waits[w.wait_key] = w
    for r in conn.execute(SQL_STATE_CHECKPOINTS, (run_id,)):
        state.checkpoints[(r[0], r[1])] = CheckpointRecord(r[0], r[1], r[2], r[3])
    return state


class SQLiteStore:
    """:class:`~pyworkflow.store.Store` on one SQLite file (WAL, group commit)."""

    def __init__(
        self,
        path: str,
        *,
        synchronous: str = "FULL",
        db: SQLiteDatabase | None = None,
        write_timeout: float | None = WRITE_TIMEOUT,
    ) -> None:
        if db is None:
            try:
                db = SQLiteDatabase(
                    path,
                    migrations=pyworkflow_migrations(),
                    synchronous=synchronous,
                    write_timeout=write_timeout,
                )
            except (sqlite3.DatabaseError, OSError) as exc:
                raise ConfigurationError(f"cannot open {path!r} as a SQLite database: {exc}") from exc
        self.db = db
        self.db.prepare_writers(WRITER_STATEMENTS)
        self.url = sqlite_url(self.db.path)

    @property
    def database(self) -> SQLiteDatabase:
        """The kit database under this store (its reads serve the metrics' state gauges)."""
        return self.db

    def close(self) -> None:
        self.db.close()

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
        def tx(conn: sqlite3.Connection) -> Claim | None:
            status = RunStatus.RUNNING if lease_owner else RunStatus.PENDING
            epoch = 1 if lease_owner else 0
            expires = now + lease_ttl if lease_owner else None
            conn.execute(SQL_CREATE_RUN, (run_id, workflow, status, input, now, epoch, lease_owner, expires))
            if also is not None:
                also(conn)
            return Claim(Fence(run_id, epoch, 0), workflow, input, resumed=False) if lease_owner else None

        # With an owner, the write's value is the claim itself: ``abandoned`` takes it as it is.
        given = cast("Callable[[Claim | None], None] | None", abandoned if lease_owner else None)
        return await self.db.write(tx, abandoned=given)

    async def get_run(self, run_id: str) -> RunRecord | None:
        row = self.db.reader().execute(SQL_GET_RUN, (run_id,)).fetchone()
        return run_from_row(row) if row else None

    async def list_runs(
        self,
        *,
        status: RunStatus | None = None,
        workflow: str | None = None,
        limit: int = 100,
        after: str | None = None,
    ) -> list[RunRecord]:
        reader = self.db.reader()
        cursor = None
        if after is not None:
            cursor = reader.execute(SQL_RUN_CURSOR, (after,)).fetchone()
            if cursor is None:
                raise WorkflowNotFoundError(f"no run {after!r} to continue the list after")
        sql, params = list_runs_sql(status, workflow, cursor)
        return [run_from_row(r) for r in reader.execute(sql, (*params, int(limit)))]

    async def get_events(self, run_id: str, *, after_seq: int = 0, limit: int = 10_000) -> list[Event]:
        rows = self.db.reader().execute(SQL_EVENTS, (run_id, after_seq, limit)).fetchall()
        return [Event(*r) for r in rows]

    async def load_state(self, run_id: str) -> RunState:
        # No enclosing read transaction: the run is leased to the caller, so its steps and
        # checkpoints cannot change meanwhile; a wait resolved between the statements is seen
        # either way, and the wake-up it queued gives the run another turn. (This store's
        # claims carry the state already: see _claim_row.)
        return _read_state(self.db.reader(), run_id)

    async def cancel_run(
        self,
        run_id: str,
        *,
        now: float,
        reason: str | None = None,
        also: Callable[[Any], None] | None = None,
    ) -> bool:
        def tx(conn: sqlite3.Connection) -> bool:
            row = conn.execute(SQL_RUN_STATUS, (run_id,)).fetchone()
            if row is None:
                raise WorkflowNotFoundError(f"no run {run_id!r}")
            if run_status(row[0]).is_terminal:
                return False
            _end_run(conn, run_id, RunStatus.CANCELLED, None, None, now)
            if reason is not None:
                conn.execute(SQL_CANCEL_REASON, (cancel_reason(reason), run_id))
            if also is not None:
                also(conn)
            return True

        return await self.db.write(tx)

    async def retry_run(self, run_id: str, *, now: float, also: Callable[[Any], None] | None = None) -> str:
        def tx(conn: sqlite3.Connection) -> str:
            outcome = retry_run_tx(conn, run_id, now)
            if outcome == "missing":
                raise WorkflowNotFoundError(f"no run {run_id!r}")
            if outcome == "ok" and also is not None:
                also(conn)
            return outcome

        return await self.db.write(tx)

    # -- the queue -------------------------------------------------------------------------------

    async def has_ready(self, *, now: float) -> bool:
        return self.db.reader().execute(SQL_ANY_READY, (now,)).fetchone() is not None

    async def claim(
        self, owner: str, *, limit: int, now: float, lease_ttl: float, max_crashes: int
    ) -> list[Claim]:
        def tx(conn: sqlite3.Connection) -> list[Claim]:
            claims: list[Claim] = []
            for row in conn.execute(SQL_READY, (now, limit)).fetchall():
                claim = _claim_row(conn, row, owner, now, lease_ttl, max_crashes)
                if claim is not None:
                    claims.append(claim)
            return claims

        return await self.db.write(tx)

    async def heartbeat(self, owner: str, *, lease_expires_at: float) -> int:
        return await self.db.write(lambda c: c.execute(SQL_HEARTBEAT, (lease_expires_at, owner)).rowcount)

    async def expire_leases_of(self, owners: Sequence[str], *, now: float) -> int:
        def tx(conn: sqlite3.Connection) -> int:
            return sum(conn.execute(SQL_EXPIRE_LEASES, (now - 1, o)).rowcount for o in owners)

        return await self.db.write(tx)

    async def lease_owners(self, *, now: float) -> list[str]:
        return [r[0] for r in self.db.reader().execute(SQL_LEASE_OWNERS, (now,))]

    async def next_due(self) -> float | None:
        queued, deadline = self.db.reader().execute(SQL_NEXT_DUE).fetchone()
        known = [float(t) for t in (queued, deadline) if t is not None]
        return min(known) if known else None

    async def poll(self, owner: str, *, limit: int, now: float, lease_ttl: float, max_crashes: int) -> Poll:
        # Reads are cheap here (this thread's reader connection): write only when there is work.
        due = await self.next_due()
        claims: list[Claim] = []
        if due is not None and due <= now:
            await self.expire_due_waits(now=now)
            if limit > 0 and await self.has_ready(now=now):
                claims = await self.claim(
                    owner, limit=limit, now=now, lease_ttl=lease_ttl, max_crashes=max_crashes
                )
            due = await self.next_due()
        return Poll(claims, due)

    async def release(self, fence: Fence, *, now: float) -> None:
        def tx(conn: sqlite3.Connection) -> None:
            if _holds(conn, fence):
                conn.execute(SQL_UNLEASE, (now, fence.run_id))

        await self.db.write(tx)

    # -- turn writes -----------------------------------------------------------------------------

    async def complete_step(self, fence: Fence, step_key: str, result: bytes, *, now: float) -> None:
        def tx(conn: sqlite3.Connection) -> None:
            params = (fence.run_id, fence.epoch, step_key, result, now)
            _transition(conn, SQL_COMPLETE_STEP, params, fence, step_key)

        await self.db.write(tx)

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
        def tx(conn: sqlite3.Connection) -> None:
            _check_fence(conn, fence)
            status = StepStatus.RETRYING if retry else StepStatus.FAILED
            params = (fence.run_id, step_key, status, attempt, None, error, delivered, now)
            if conn.execute(SQL_UPSERT_STEP, params).rowcount == 0:
                raise StepAlreadyCompletedError(
                    f"step {step_key!r} of run {fence.run_id} already has a result"
                )
            _event(conn, fence.run_id, now, "step_retrying" if retry else "step_failed", step_key, error)
            if retry is not None:  # (a retry's wait of that key, written by an earlier turn, stands)
                _create_wait(conn, fence, retry, now, suspend=False)
            else:  # a final failure: the step never runs again, its checkpoints go with it
                conn.execute(SQL_DELETE_STEP_CHECKPOINTS, (fence.run_id, step_key))

        await self.db.write(tx)

    async def save_checkpoint(
        self, fence: Fence, scope: str, name: str, value: bytes, *, expected_revision: int | None, now: float
    ) -> int:
        run_id = fence.run_id

        def tx(conn: sqlite3.Connection) -> int:
            # The fence, the compare-and-set (write_checkpoint's rule) and the event: one statement.
            params = (run_id, fence.epoch, scope, name, value, expected_revision, now)
            try:
                _transition(conn, SQL_SAVE_CHECKPOINT, params, fence)
            except sqlite3.IntegrityError as exc:
                raise_checkpoint_refusal(conn, exc, run_id, scope, name, expected_revision)
            return checkpoint_written(conn, run_id, scope, name, expected_revision)

        return await self.db.write(tx)

    async def delete_checkpoint(
        self, fence: Fence, scope: str, name: str, *, now: float, defer: bool = False
    ) -> bool:
        def tx(conn: sqlite3.Connection) -> bool:
            _check_fence(conn, fence)
            deleted = conn.execute(SQL_DELETE_CHECKPOINT, (fence.run_id, scope, name)).rowcount > 0
            if deleted:
                _event(conn, fence.run_id, now, "checkpoint_deleted", f"{scope}/{name}" if name else scope)
            return deleted

        if defer:  # in the transaction of the turn's next write (see Store.delete_checkpoint)
            self.db.write_deferred(tx, log_deferred(fence, "checkpoint deletion"))
            return True
        return await self.db.write(tx)

    async def create_wait(
        self, fence: Fence, wait: NewWait, *, now: float, suspend: bool = False
    ) -> WaitRecord:
        def tx(conn: sqlite3.Connection) -> WaitRecord:
            # The wait, and with it the suspension's status and event (one statement).
            if _create_wait(conn, fence, wait, now, suspend=suspend):
                return pending_wait(fence.run_id, wait, now)
            # The run has a wait of that key already (the fence held): the turn suspends on it.
            if suspend:
                conn.execute(SQL_SUSPENDED, (fence.run_id, now))
            return wait_from_row(conn.execute(SQL_WAIT_BY_KEY, (fence.run_id, wait.wait_key)).fetchone())

        return await self.db.write(tx)

    async def add_wait_token(self, fence: Fence, wait_id: str, token_digest: bytes) -> None:
        def tx(conn: sqlite3.Connection) -> None:
            _check_fence(conn, fence)
            conn.execute(SQL_INSERT_WAIT_TOKEN, (token_digest, wait_id))

        await self.db.write(tx)

    async def suspend_run(
        self,
        fence: Fence,
        *,
        notified: Sequence[str],
        delivered: dict[str, int],
        now: float,
        recorded: bool = False,
        then: Callable[[BaseException | None], None] | None = None,
        due: Callable[[], None] | None = None,
    ) -> None:
        left_due = False

        def tx(conn: sqlite3.Connection) -> None:
            nonlocal left_due
            left_due = _end_turn(conn, fence, now)  # first: it checks the fence
            for wait_id in notified:
                conn.execute(SQL_MARK_NOTIFIED, (wait_id,))
            for step_key, count in delivered.items():
                conn.execute(SQL_STEP_PROGRESS, (fence.run_id, step_key, count, now))
            if not recorded:
                conn.execute(SQL_SUSPENDED, (fence.run_id, now))

        def ended(error: BaseException | None) -> None:
            if then is not None:
                then(error)
            if error is None and left_due and due is not None:
                due()  # nothing else tells this process: SQLite does not notify

        if recorded:
            # The status and event committed with the wait (create_wait(suspend=True)); what is
            # left frees the lease, and a crash before it commits leaves the lease to expire and
            # the turn to run again (on_created again, at least once): no caller waits for it.
            self.db.write_deferred(tx, log_deferred(fence, "end of a suspended turn", ended))
            return
        try:
            await self.db.write(tx)
        except BaseException as exc:
            ended(exc)
            raise
        ended(None)

    async def complete_run(self, fence: Fence, result: bytes, *, now: float) -> None:
        def tx(conn: sqlite3.Connection) -> None:
            _end_run(conn, fence.run_id, RunStatus.COMPLETED, result, None, now, fence)

        await self.db.write(tx)

    async def fail_run(self, fence: Fence, error: bytes, *, now: float) -> None:
        def tx(conn: sqlite3.Connection) -> None:
            _end_run(conn, fence.run_id, RunStatus.FAILED, None, error, now, fence)

        await self.db.write(tx)

    # -- decisions -------------------------------------------------------------------------------

    async def get_wait_by_token(self, token_digest: bytes) -> WaitRecord | None:
        return _find_by_token(self.db.reader(), token_digest)

    async def get_wait(self, wait_id: str) -> WaitRecord | None:
        row = self.db.reader().execute(SQL_WAIT_BY_ID, (wait_id,)).fetchone()
        return wait_from_row(row) if row else None

    async def list_waits(
        self,
        *,
        status: WaitStatus | None = WaitStatus.PENDING,
        kinds: Sequence[WaitKind] | None = None,
        limit: int = 100,
    ) -> list[WaitRecord]:
        sql, params = list_waits_sql(status, kinds)
        return [wait_from_row(r) for r in self.db.reader().execute(sql, (*params, limit))]

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
        def tx(conn: sqlite3.Connection) -> WaitRecord:
            wait = _resolve(conn, token_digest, wait_id, payload, now, check)
            if also is not None and wait.status == WaitStatus.RECEIVED:
                also(conn)
            return wait

        wait = await self.db.write(tx)
        if wait.status == WaitStatus.EXPIRED:  # past its deadline, and recorded as expired just now
            raise_if_resolved(wait)
        return wait

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
        def tx(conn: sqlite3.Connection) -> tuple[WaitRecord, Claim | None]:
            wait = _resolve(conn, token_digest, None, payload, now, check)
            if wait.status != WaitStatus.RECEIVED:
                return wait, None
            # The run the decision woke, if nobody holds it: its turn's claim, as a tick's.
            row = conn.execute(SQL_READY_RUN, (wait.run_id, now)).fetchone()
            claim = _claim_row(conn, row, owner, now, lease_ttl, max_crashes) if row else None
            return wait, claim

        wait, claim = await self.db.write(tx, abandoned=_claimed(abandoned, 1) if abandoned else None)
        if wait.status == WaitStatus.EXPIRED:
            raise_if_resolved(wait)
        return wait, claim

    async def expire_due_waits(self, *, now: float, limit: int = 500) -> int:
        # The runtime calls this on every tick with due work (mostly due queue rows, not waits):
        # skip the write transaction when the index says no wait is due yet.
        first = self.db.reader().execute(SQL_NEXT_WAIT).fetchone()[0]
        if first is None or first > now:
            return 0

        def tx(conn: sqlite3.Connection) -> int:
            count = 0
            for wait_id, run_id, wait_key, _kind in conn.execute(SQL_DUE_WAITS, (now, limit)).fetchall():
                count += _expire_wait(conn, wait_id, run_id, wait_key, now)
            return count

        return await self.db.write(tx)


def _resolve(conn: sqlite3.Connection, token_digest: bytes | None, wait_id: str | None, payload: bytes,
             now: float, check: Callable[[WaitRecord], None] | None) -> WaitRecord:  # fmt: skip
    """A decision, inside its transaction: the wait moves ``pending -> received`` and its run is
    woken; past its deadline it is expired instead (returned ``expired``: the caller refuses)."""
    if token_digest is not None:
        wait = _find_by_token(conn, token_digest)
    else:
        row = conn.execute(SQL_WAIT_BY_ID, (wait_id,)).fetchone()
        wait = wait_from_row(row) if row else None
    if wait is None:
        raise hook_not_found(token_digest, wait_id)
    refuse_approval(wait)
    raise_if_resolved(wait)
    if wait.expires_at is not None and wait.expires_at <= now:
        # Past its deadline but not swept yet: the deadline wins, and is recorded now.
        _expire_wait(conn, wait.id, wait.run_id, wait.wait_key, now)
        wait.status, wait.resolved_at = WaitStatus.EXPIRED, now
        return wait
    if check is not None:
        check(wait)
    conn.execute(SQL_RESOLVE_WAIT, (WaitStatus.RECEIVED, payload, now, wait.id))
    _event(conn, wait.run_id, now, "wait_received", wait.wait_key)
    _wake(conn, wait.run_id, wait.id, now)
    wait.status, wait.payload, wait.resolved_at = WaitStatus.RECEIVED, payload, now
    return wait


def _create_wait(conn: sqlite3.Connection, fence: Fence, wait: NewWait, now: float, *, suspend: bool) -> bool:
    """A turn's wait (a hook, a timer, a step's retry back-off) with its event, and with
    ``suspend`` the run's suspension: one statement (``pyworkflow_create_wait``). False, with
    nothing written, when the run has a wait of that key already."""
    params = (fence.run_id, fence.epoch, wait.id, wait.wait_key, wait.kind, wait.name, wait.step_key,
              wait.token_digest, wait.expires_at, wait.payload_schema, suspend, now)  # fmt: skip
    return _transition(conn, SQL_CREATE_WAIT, params, fence)


def _find_by_token(conn: sqlite3.Connection, token_digest: bytes) -> WaitRecord | None:
    row = conn.execute(SQL_WAIT_BY_TOKEN, (token_digest,)).fetchone()
    if row is None:
        extra = conn.execute(SQL_WAIT_ID_BY_EXTRA_TOKEN, (token_digest,)).fetchone()
        if extra is None:
            return None
        row = conn.execute(SQL_WAIT_BY_ID, (extra[0],)).fetchone()
    return wait_from_row(row) if row else None


def _expire_wait(conn: sqlite3.Connection, wait_id: str, run_id: str, wait_key: str, now: float) -> bool:
    """A pending wait's deadline passed: expire it and wake its run (the sweeper's expiry and a
    decision that came too late). False when it had already left 'pending' (nothing changes)."""
    if not conn.execute(SQL_RESOLVE_WAIT, (WaitStatus.EXPIRED, None, now, wait_id)).rowcount:
        return False
    _event(conn, run_id, now, "wait_expired", wait_key)
    _wake(conn, run_id, wait_id, now)
    return True
