"""The building blocks of the PostgreSQL store's multi-statement transitions (run on a
connection of its async pool that speaks the kit's SQL, inside one transaction): the fence check
(by the server-side ``pyworkflow_fence``), events, waits, and the outcome of the server-side
turn writes, and the rows of the server-side claims and state reads."""

from __future__ import annotations

from collections.abc import Callable, Sequence
from typing import Any

from .._errors import StepAlreadyCompletedError
from ._jobs import Rows
from ._pg_db import AsyncPgConnection
from ._pg_sql import SQL_APPEND_EVENT, SQL_FN_FENCE, SQL_INSERT_WAIT, SQL_STEP
from ._protocol import (
    CheckpointRecord,
    Claim,
    Fence,
    NewWait,
    Poll,
    RunState,
    StepRecord,
    StepStatus,
    WaitKind,
    WaitRecord,
    WaitStatus,
    step_status,
)
from ._rows import fence_refused, hook_not_found, raise_if_resolved, refuse_approval, wait_from_row

Conn = AsyncPgConnection


async def _event(conn: Conn, run_id: str, now: float, type_: str, key: str | None = None,
                 data: bytes | None = None) -> None:  # fmt: skip
    await conn.execute(SQL_APPEND_EVENT, {"run": run_id, "at": now, "type": type_, "key": key, "data": data})


async def _fenced(conn: Conn, fence: Fence) -> str:
    """Take the run's lock and check the turn's fence (the server-side ``pyworkflow_fence``, the
    rule every fenced write follows): 'ok', 'lease_lost' or 'cancelled'."""
    cur = await conn.execute(SQL_FN_FENCE, (fence.run_id, fence.epoch))
    row = await cur.fetchone()
    return str(row[0]) if row is not None else "lease_lost"


async def _check_fence(conn: Conn, fence: Fence) -> None:
    _check_outcome(await _fenced(conn, fence), fence.run_id, fence.epoch, "")


async def _affected(conn: Conn, sql: str, params: Any) -> int:
    """Rows a DML statement changed. Transactions run in pipeline mode, where ``rowcount`` is not
    known before a sync: the statement returns a row per change instead (``RETURNING 1``)."""
    cur = await conn.execute(sql + " RETURNING 1", params)
    return len(await cur.fetchall())


async def _insert_wait(conn: Conn, run_id: str, wait: NewWait, now: float) -> None:
    await conn.execute(
        SQL_INSERT_WAIT,
        (wait.id, run_id, wait.wait_key, str(wait.kind), wait.name, wait.step_key, wait.token_digest, now,
         wait.expires_at, wait.payload_schema),
    )  # fmt: skip
    await _event(conn, run_id, now, "wait_created", wait.wait_key)


def _check_outcome(outcome: str, run_id: str, epoch: int, what: str) -> str:
    """Raise the error a server-side turn write reported; return its value (after ``ok:``)."""
    if outcome == "ok" or outcome.startswith("ok:"):
        return outcome[3:]
    if outcome in ("cancelled", "lease_lost"):
        raise fence_refused(run_id, epoch, cancelled=outcome == "cancelled")
    if outcome == "has_result":
        raise StepAlreadyCompletedError(f"step {what!r} of run {run_id} already has a result")
    raise RuntimeError(f"unexpected outcome {outcome!r} of a turn write")


async def _refuse_second_result(conn: Conn, run_id: str, step_key: str) -> None:
    row = await (await conn.execute(SQL_STEP, (run_id, step_key))).fetchone()
    if row is not None and row[0] in (StepStatus.COMPLETED, StepStatus.FAILED):
        raise StepAlreadyCompletedError(f"step {step_key!r} of run {run_id} already has a result")


def _add_state_row(state: RunState, r: Sequence[Any], k: int) -> None:
    """Add a row of ``pyworkflow_run_states`` (migration 0015) to ``state``: ``r[k]`` is its kind
    (1 a step, 2 a wait, 3 a checkpoint), the step's six columns follow, then the wait's 13, then
    the checkpoint's four."""
    if r[k] == 1:
        key = r[k + 1]
        state.steps[key] = StepRecord(key, step_status(r[k + 2]), r[k + 3], r[k + 4], r[k + 5], r[k + 6])
    elif r[k] == 2:
        wait = wait_from_row(r[k + 7 : k + 20])
        state.waits[wait.wait_key] = wait
    else:
        scope, name = r[k + 20], r[k + 21]
        state.checkpoints[(scope, name)] = CheckpointRecord(scope, name, r[k + 22], r[k + 23])


def _first_float(rows: Sequence[Sequence[Any]]) -> float | None:
    """A one-value read's value (a time; NULL: None)."""
    value = rows[0][0] if rows else None
    return None if value is None else float(value)


def _claims_with_states(rows: Sequence[Sequence[Any]]) -> Poll:
    """The claims ``pyworkflow_claim_with_states`` returned, each with its run's state (empty for
    a first turn), and the next due time of a poll (None for the other claims)."""
    claims: dict[str, Claim] = {}
    due: float | None = None
    for r in rows:
        if r[7] is not None:  # a state row of a resumed run claimed above it
            state = claims[r[0]].state
            assert state is not None
            _add_state_row(state, r, 7)
        elif r[0] is None:  # a poll's last row
            due = float(r[6]) if r[6] is not None else None
        else:
            claims[r[0]] = Claim(Fence(r[0], r[1], r[2]), r[3], r[4], resumed=r[5], state=RunState())
    return Poll(list(claims.values()), due)


def _screened(wait: WaitRecord, now: float, check: Callable[[WaitRecord], None] | None) -> WaitRecord:
    """``wait``, read before its decision, refused as the decision would be (an approval, already
    resolved) and, unless past its deadline, shown to ``check`` (the payload's schema) before
    anything is written."""
    refuse_approval(wait)  # a wait's kind never changes: no need to read it again under the lock
    raise_if_resolved(wait)
    if check is not None and (wait.expires_at is None or wait.expires_at > now):
        check(wait)
    return wait


def _decided(
    wait: WaitRecord,
    outcome: str,
    payload: bytes,
    now: float,
    token_digest: bytes | None,
    wait_id: str | None,
) -> WaitRecord:
    """``wait`` as a decision's statement left it (outcome 'ok'), or the decision's refusal."""
    if outcome == "approval":  # the function refuses approvals too (checked before already)
        wait.kind = WaitKind.APPROVAL
        refuse_approval(wait)
    if outcome == "missing":
        raise hook_not_found(token_digest, wait_id)
    if outcome.startswith("resolved:") or outcome == "expired":
        # Refused under the lock (a racing decision won), or past its deadline and expired now:
        # the same refusal as before the write.
        wait.status = WaitStatus(outcome.split(":", 1)[1]) if ":" in outcome else WaitStatus.EXPIRED
        raise_if_resolved(wait)
    if outcome != "ok":
        raise RuntimeError(f"unexpected outcome {outcome!r} of a decision")
    wait.status, wait.payload, wait.resolved_at = WaitStatus.RECEIVED, payload, now
    return wait


def _claim_in(rows: Sequence[Sequence[Any]], at: int) -> Claim | None:
    """The claim a decision's statement returned (its columns from ``at``), or None."""
    claims = _claims_with_states([r[at:] for r in rows]).claims
    return claims[0] if claims else None


def _claimed(abandoned: Callable[[Claim], None], at: int) -> Callable[[Rows], None]:
    """A statement's ``abandoned`` for a decision's caller's: the claim in its rows, if any."""

    def hand_over(rows: Rows) -> None:
        claim = _claim_in(rows, at)
        if claim is not None:
            abandoned(claim)

    return hand_over
