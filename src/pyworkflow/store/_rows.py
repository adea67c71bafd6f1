"""Row shapes and checks shared by the SQLite and PostgreSQL stores (same columns, same order)."""

from __future__ import annotations

from collections.abc import Sequence
from typing import Any

from .._errors import HookAlreadyReceivedError, HookCancelledError, HookExpiredError
from ._protocol import RunRecord, RunStatus, WaitKind, WaitRecord, WaitStatus

WAIT_COLUMNS = (
    "id, run_id, wait_key, kind, name, step_key, status, notified, created_at, expires_at, resolved_at,"
    " payload, payload_schema"
)
RUN_COLUMNS = "id, workflow, status, input, result, error, created_at, updated_at, finished_at"


def run_from_row(row: Sequence[Any]) -> RunRecord:
    return RunRecord(row[0], row[1], RunStatus(row[2]), row[3], row[4], row[5], row[6], row[7], row[8])


def wait_from_row(row: Sequence[Any]) -> WaitRecord:
    return WaitRecord(
        id=row[0],
        run_id=row[1],
        wait_key=row[2],
        kind=WaitKind(row[3]),
        name=row[4],
        step_key=row[5],
        status=WaitStatus(row[6]),
        notified=bool(row[7]),
        created_at=row[8],
        expires_at=row[9],
        resolved_at=row[10],
        payload=row[11],
        payload_schema=row[12],
    )


def raise_if_resolved(wait: WaitRecord) -> None:
    """A decision for a wait that already left 'pending' is refused with the matching error."""
    if wait.status == WaitStatus.RECEIVED:
        raise HookAlreadyReceivedError(f"hook {wait.name!r} already received a payload", wait_id=wait.id)
    if wait.status == WaitStatus.EXPIRED:
        raise HookExpiredError(f"hook {wait.name!r} expired before the payload arrived", wait_id=wait.id)
    if wait.status == WaitStatus.CANCELLED:
        raise HookCancelledError(f"hook {wait.name!r} was cancelled with its run", wait_id=wait.id)


def list_waits_sql(
    status: WaitStatus | None, kinds: Sequence[WaitKind] | None, mark: str
) -> tuple[str, list[str]]:
    """Listing waits for an inbox (``mark`` is the dialect's placeholder); pending ones use the
    partial index ``waits_pending``."""
    clauses, params = [], []
    if status is not None:
        clauses.append(f"status = {mark}")
        params.append(str(status))
    if kinds:
        clauses.append(f"kind IN ({', '.join([mark] * len(kinds))})")
        params.extend(str(k) for k in kinds)
    where = f"WHERE {' AND '.join(clauses)}" if clauses else ""
    return f"SELECT {WAIT_COLUMNS} FROM waits {where} ORDER BY created_at LIMIT {mark}", params
