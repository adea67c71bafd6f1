"""The building blocks of the PostgreSQL store's multi-statement transitions (run on a
connection of its async pool, inside one transaction): the run's lock and the fence check, events,
waits, a claimed row, and the outcome of the server-side turn writes."""

from __future__ import annotations

from collections.abc import Sequence
from typing import Any

import psycopg

from .._errors import CancellationError, LeaseLostError, StepAlreadyCompletedError
from ._pg_sql import (
    _CRASHED,
    SQL_APPEND_EVENT,
    SQL_CANCEL_WAITS,
    SQL_DELETE_QUEUE,
    SQL_FINISH_RUN,
    SQL_INSERT_WAIT,
    SQL_LEASE,
    SQL_LOCK_RUN,
    SQL_SET_RUN_STATUS,
    SQL_STEP,
)
from ._protocol import Claim, Fence, NewWait, RunStatus, StepStatus, WaitRecord, WaitStatus

Conn = psycopg.AsyncConnection[Any]


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
