"""Row shapes and checks shared by the SQLite and PostgreSQL stores (same columns, same order)."""

from __future__ import annotations

import logging
import sqlite3
from collections.abc import Callable, Sequence
from typing import Any, NoReturn

from .._errors import (
    CancellationError,
    CheckpointConflictError,
    HookAlreadyReceivedError,
    HookCancelledError,
    HookExpiredError,
    HookNotFoundError,
    LeaseLostError,
)
from ._protocol import (
    Fence,
    NewWait,
    RunRecord,
    RunStatus,
    WaitKind,
    WaitRecord,
    WaitStatus,
    run_status,
    wait_kind,
    wait_status,
)  # fmt: skip
from ._sqlite_statements import REVISION_REFUSED, SQL_PUT_CHECKPOINT

log = logging.getLogger("pyworkflow.store")

WAIT_COLUMNS = (
    "id, run_id, wait_key, kind, name, step_key, status, notified, created_at, expires_at, resolved_at,"
    " payload, payload_schema"
)
RUN_COLUMNS = "id, workflow, status, input, result, error, created_at, updated_at, finished_at"


def run_from_row(row: Sequence[Any]) -> RunRecord:
    return RunRecord(row[0], row[1], run_status(row[2]), row[3], row[4], row[5], row[6], row[7], row[8])


def wait_from_row(row: Sequence[Any]) -> WaitRecord:
    return WaitRecord(
        id=row[0],
        run_id=row[1],
        wait_key=row[2],
        kind=wait_kind(row[3]),
        name=row[4],
        step_key=row[5],
        status=wait_status(row[6]),
        notified=bool(row[7]),
        created_at=row[8],
        expires_at=row[9],
        resolved_at=row[10],
        payload=row[11],
        payload_schema=row[12],
    )


def pending_wait(run_id: str, wait: NewWait, now: float) -> WaitRecord:
    """The record of ``wait``, just created for ``run_id`` at ``now`` (what a read would return)."""
    return WaitRecord(
        wait.id, run_id, wait.wait_key, wait.kind, wait.name, wait.step_key, WaitStatus.PENDING, False, now,
        wait.expires_at, None, None, wait.payload_schema,
    )  # fmt: skip


def fence_refused(run_id: str, epoch: int, *, cancelled: bool) -> Exception:
    """The error of a fenced write whose turn no longer holds the run (its epoch is not the queue
    row's): the run was cancelled, or the lease was lost (another turn took it, or it ended)."""
    if cancelled:
        return CancellationError(f"run {run_id} was cancelled")
    return LeaseLostError(f"run {run_id}: lease epoch {epoch} is no longer current")


def hook_not_found(token_digest: bytes | None, wait_id: str | None) -> HookNotFoundError:
    """The error of a decision for a wait that does not exist (found by token or by id)."""
    return HookNotFoundError("no hook has this token" if token_digest else f"no hook {wait_id!r}")


def raise_if_resolved(wait: WaitRecord) -> None:
    """A decision for a wait that already left 'pending' is refused with the matching error."""
    if wait.status == WaitStatus.RECEIVED:
        raise HookAlreadyReceivedError(f"hook {wait.name!r} already received a payload", wait_id=wait.id)
    if wait.status == WaitStatus.EXPIRED:
        raise HookExpiredError(f"hook {wait.name!r} expired before the payload arrived", wait_id=wait.id)
    if wait.status == WaitStatus.CANCELLED:
        raise HookCancelledError(f"hook {wait.name!r} was cancelled with its run", wait_id=wait.id)


def refuse_approval(wait: WaitRecord) -> None:
    """An approval (kind 'approval') is decided through the graph server, never by
    ``resolve_wait``: refused with ``HookNotFoundError`` before anything is written."""
    if wait.kind == WaitKind.APPROVAL:
        raise HookNotFoundError(
            f"wait {wait.id!r} is an approval; an approval is decided through the graph server"
        )


def list_waits_sql(status: WaitStatus | None, kinds: Sequence[WaitKind] | None) -> tuple[str, list[str]]:
    """Listing waits for an inbox (the caller appends the limit to the parameters); pending ones
    use the partial index ``waits_pending``."""
    clauses, params = [], []
    if status is not None:
        clauses.append("status = ?")
        params.append(str(status))
    if kinds:
        clauses.append(f"kind IN ({', '.join(['?'] * len(kinds))})")
        params.extend(str(k) for k in kinds)
    where = f"WHERE {' AND '.join(clauses)}" if clauses else ""
    return f"SELECT {WAIT_COLUMNS} FROM waits {where} ORDER BY created_at LIMIT ?", params


def cancel_reason(reason: str) -> bytes:
    """A cancelled run's error, when the operator gave a reason (``Store.cancel_run``)."""
    import orjson

    return orjson.dumps({"type": "CancellationError", "message": reason})


#: Where a page of runs continues: the cursor run's place in the newest-first order (by id).
SQL_RUN_CURSOR = "SELECT created_at, id FROM runs WHERE id = ?"


def list_runs_sql(
    status: RunStatus | None, workflow: str | None, cursor: Sequence[Any] | None
) -> tuple[str, list[Any]]:
    """A page of runs newest first, ordered by (creation time, id) so that a page ends at one
    place and the next (``cursor``: the last run's ``(created_at, id)``) starts right after it,
    whatever was created meanwhile. ``runs_by_status`` serves a status filter, ``runs_by_created``
    the others (an index walk bounded by the LIMIT; the caller appends the limit to the
    parameters)."""
    clauses: list[str] = []
    params: list[Any] = []
    if status is not None:
        clauses.append("status = ?")
        params.append(str(status))
    if workflow is not None:
        clauses.append("workflow = ?")
        params.append(workflow)
    if cursor is not None:
        clauses.append("(created_at < ? OR (created_at = ? AND id < ?))")
        params.extend((cursor[0], cursor[0], cursor[1]))
    where = f"WHERE {' AND '.join(clauses)}" if clauses else ""
    return f"SELECT {RUN_COLUMNS} FROM runs {where} ORDER BY created_at DESC, id DESC LIMIT ?", params


# -- checkpoints: one compare-and-set rule for every face ---------------------------------------

#: A checkpoint's current revision (primary key lookup).
SQL_CHECKPOINT_REVISION = "SELECT revision FROM checkpoints WHERE run_id = ? AND scope = ? AND name = ?"


def check_revision(what: str, expected: int | None, current: int) -> int:
    """The compare-and-set rule: a write that expects revision ``expected`` (None: any; 0: none
    yet) of something now at ``current`` is refused with ``CheckpointConflictError`` unless they
    match. Returns the revision the write creates."""
    if expected is not None and expected != current:
        raise CheckpointConflictError(
            f"{what} is at revision {current}, not the expected {expected}", current_revision=current
        )
    return current + 1


#: Write a checkpoint at the revision the caller checked (PostgreSQL's synchronous connection).
SQL_UPSERT_CHECKPOINT = """
INSERT INTO checkpoints (run_id, scope, name, value, revision, updated_at) VALUES (?, ?, ?, ?, ?, ?)
ON CONFLICT (run_id, scope, name) DO UPDATE SET
    value = excluded.value, revision = excluded.revision, updated_at = excluded.updated_at
"""


def write_checkpoint(
    conn: Any, run_id: str, scope: str, name: str, value: bytes, expected_revision: int | None, now: float
) -> int:
    """Compare-and-set a checkpoint inside the caller's write transaction on a kit database
    connection; returns the new revision. On SQLite (a writer connection of a store's database)
    one statement, ``pyworkflow_put_checkpoint`` (``_sqlite_statements.py``: the rule pyworkflow's
    own saves apply too); on PostgreSQL's synchronous connection, which locks the run first, the
    revision's read and the write. PostgreSQL's stores apply the rule server-side
    (``pyworkflow_save_checkpoint``, migration 0002; atfgraph's ``atfg_save_checkpoint``)."""
    if isinstance(conn, sqlite3.Connection):
        try:
            conn.execute(SQL_PUT_CHECKPOINT, (run_id, scope, name, value, expected_revision, now))
        except sqlite3.IntegrityError as exc:
            raise_checkpoint_refusal(conn, exc, run_id, scope, name, expected_revision)
        return checkpoint_written(conn, run_id, scope, name, expected_revision)
    row = conn.execute(SQL_CHECKPOINT_REVISION, (run_id, scope, name)).fetchone()
    revision = check_revision(f"checkpoint {name!r}", expected_revision, row[0] if row else 0)
    conn.execute(SQL_UPSERT_CHECKPOINT, (run_id, scope, name, value, revision, now))
    return revision


def raise_checkpoint_refusal(
    conn: sqlite3.Connection, error: sqlite3.IntegrityError, run_id: str, scope: str, name: str,
    expected_revision: int | None,
) -> NoReturn:  # fmt: skip
    """SQLite's refusal of a checkpoint's compare-and-set (``REVISION_REFUSED``) as
    ``CheckpointConflictError`` with the current revision; any other error as it is."""
    if str(error) == REVISION_REFUSED:
        row = conn.execute(SQL_CHECKPOINT_REVISION, (run_id, scope, name)).fetchone()
        check_revision(f"checkpoint {name!r}", expected_revision, row[0] if row else 0)
    raise error


def checkpoint_written(
    conn: sqlite3.Connection, run_id: str, scope: str, name: str, expected_revision: int | None
) -> int:
    """The revision a compare-and-set just wrote: the one after the expected, else read back."""
    if expected_revision is not None:
        return expected_revision + 1
    return int(conn.execute(SQL_CHECKPOINT_REVISION, (run_id, scope, name)).fetchone()[0])


def log_deferred(
    fence: Fence, what: str, then: Callable[[BaseException | None], None] | None = None
) -> Callable[[BaseException | None], None]:
    """What a deferred write's failure leaves: the run's lease runs out and its turn runs again
    (a lost lease means another owner holds the run already). ``then(error)`` also hears of
    the outcome, after it is logged."""

    def log_failure(error: BaseException | None) -> None:
        if error is not None:
            level = logging.DEBUG if isinstance(error, LeaseLostError) else logging.WARNING
            log.log(level, "run %s: the %s was not written (%s); the turn will run again if its lease "
                    "runs out", fence.run_id, what, error)  # fmt: skip
        if then is not None:
            then(error)

    return log_failure
