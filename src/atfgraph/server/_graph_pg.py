"""The graph store's hot transitions on PostgreSQL: each one statement that calls a server-side
function (atfgraph migration ``postgres/0008_graph_functions.sql``), handed to the kit's writer
with :meth:`~pyworkflow.store.GroupCommitWriter.submit` and the traverser's run id as its key,
so the writer pipelines many callers' transitions in one round trip and groups lock runs in run id
order (as pyworkflow's PostgreSQL store does). The rules are SQLite's Python ones in ``_store``
(the PL/pgSQL is PostgreSQL's copy): a function answers with an outcome, turned here into the
same refusal; ``FALLBACK`` (a rare case it leaves to the Python rule, having written nothing)
sends the caller to the write function.

A statement that fails rolls back its group, and each statement of the group is then run again
alone; a function is a whole transition (its audit entry included), so that is safe.

The statements are written as all the server's SQL is (``?`` placeholders; the kit's writer
translates them for psycopg, see ``pyworkflow.store._pg_db.translate``).
"""

from __future__ import annotations

from collections.abc import Sequence
from dataclasses import replace
from typing import Any

from pyworkflow import CheckpointConflictError
from pyworkflow.store import GroupCommitWriter, check_revision

from .._json import fragment, loads
from ._graph_rows import STEP_STATUS_IN, StepRecord, approval_view, step_view, traverser_view
from ._graph_sql import IS_APPROVAL, SQL_DECISION_TERMS
from ._identity import AuditEntry, audit_values
from ._refusals import Conflict, LeaseLost, NotFound
from ._stamps import iso

_STEPS = "?::text[], ?::int[], ?::text[], ?::text[], ?::bytea[], ?::bytea[]"
# Lease up to N tasks for a worker; may lock several runs (SKIP LOCKED), so it runs alone.
SQL_FN_CLAIM = "SELECT * FROM atfg_claim(?, ?, ?, ?, ?)"
SQL_FN_SAVE_CHECKPOINT = f"SELECT atfg_save_checkpoint(?, ?, ?, ?, ?, ?, {_STEPS})"
SQL_FN_REQUEST_APPROVAL = (
    f"SELECT * FROM atfg_request_approval(?, ?, ?, ?, ?, ?, ?, ?, ?, {_STEPS}, ?::text[], ?)"
)
SQL_FN_DECIDE = "SELECT * FROM atfg_decide(?, ?, ?, ?, ?, ?::text[], ?)"
# The same, refused ('terms') for an approval with a response schema or an assignment (0018).
SQL_FN_DECIDE_PLAIN = "SELECT * FROM atfg_decide_plain(?, ?, ?, ?, ?, ?::text[], ?)"
SQL_FN_SUBMIT = "SELECT * FROM atfg_submit(?, ?, ?, ?, ?, ?, ?, ?::text[], ?)"
SQL_FN_END_ATTEMPT = f"SELECT atfg_end_attempt(?, ?, ?, ?, ?, ?, {_STEPS})"
# One traverser, read in a writer's group (a read, key ""): no round trip of its own.
SQL_TRAVERSER = "SELECT * FROM atfg_traverser(?)"
# The run an approval belongs to (never changes): the key of its decision.
SQL_APPROVAL_RUN = f"SELECT w.run_id FROM waits w WHERE w.id = ? AND {IS_APPROVAL}"

#: An outcome that hands the transition to the Python write function (nothing was written).
FALLBACK = "fallback"
#: atfg_decide_plain's outcome for an approval whose terms must be read first (nothing written).
TERMS = "terms"

TRAVERSER_FIELDS = (
    "id", "target", "node_id", "version", "status", "input", "result", "error", "attempt",
    "max_attempts", "epoch", "lease_worker", "lease_expires_at", "waiting_on", "created_at",
    "updated_at", "finished_at",
)  # fmt: skip
APPROVAL_FIELDS = (
    "id", "traverser_id", "operation_key", "status", "prompt", "checkpoint", "decided_by",
    "response", "created_at", "expires_at", "decided_at",
)  # fmt: skip
_APPROVAL_BYTES = ("prompt", "checkpoint", "response", "response_schema")
_STEP_BYTES = ("result", "error")
#: Approvals whose run a decision's key is remembered for (started over when full).
_APPROVAL_RUNS_MAX = 10_000


_NO_STEPS: tuple[None, ...] = (None,) * 6


def steps_params(steps: Sequence[StepRecord]) -> tuple[list[Any] | None, ...]:
    """The reported steps as the functions' six arrays (statuses as the engine records them);
    six NULLs when there are none (atfg_record_steps returns at once), which spares the driver
    working out the element type of six empty lists on most writes."""
    if not steps:
        return _NO_STEPS
    return (
        [s.key for s in steps],
        [s.seq for s in steps],
        [s.target for s in steps],
        [STEP_STATUS_IN[s.status] for s in steps],
        [s.result for s in steps],
        [s.error for s in steps],
    )


def _audit(audit: AuditEntry | None) -> tuple[list[str | None] | None, bytes | None]:
    if audit is None:
        return None, None
    *text, detail = audit_values(audit)
    return list(text), detail


def _unhex(item: dict[str, Any], fields: Sequence[str]) -> dict[str, Any]:
    """A row from the functions' JSON: bytea arrives as PostgreSQL writes it, ``\\x`` and hex."""
    for name in fields:
        value = item[name]
        if value is not None:
            item[name] = bytes.fromhex(value[2:])
    return item


def _refuse(outcome: str, traverser_id: str) -> None:
    if outcome == "missing":
        raise NotFound.of("traverser", traverser_id)
    if outcome == "lease_lost":
        raise LeaseLost.of(traverser_id)
    raise RuntimeError(f"unexpected outcome {outcome!r} of a graph transition")


class PgTransitions:
    """The server-side transitions of one graph store on PostgreSQL."""

    def __init__(self, db: GroupCommitWriter[Any], reader: Any) -> None:
        self.db = db
        self._reader = reader  # () -> the event loop thread's read connection
        self._approval_runs: dict[str, str] = {}

    async def _call(self, sql: str, params: Sequence[Any], run_id: str | None) -> list[tuple[Any, ...]]:
        return await self.db.submit(sql, params, run_id)

    def _remember(self, approval_id: str, run_id: str) -> None:
        if len(self._approval_runs) >= _APPROVAL_RUNS_MAX:
            self._approval_runs.clear()
        self._approval_runs[approval_id] = run_id

    async def get_traverser(self, traverser_id: str) -> dict[str, Any]:
        return traverser_view(await self.traverser_row(traverser_id))

    async def traverser_row(self, traverser_id: str) -> dict[str, Any]:
        """The traverser's row (its lease's epoch, worker and expiry included)."""
        rows = await self._call(SQL_TRAVERSER, (traverser_id,), "")
        if not rows:
            raise NotFound.of("traverser", traverser_id)
        return dict(zip(TRAVERSER_FIELDS, rows[0], strict=True))

    async def submit(
        self,
        ident: str,
        target: str,
        input_json: bytes,
        node_id: str,
        max_attempts: int,
        idempotency_key: str | None,
        audit: AuditEntry | None,
        now: float,
    ) -> dict[str, Any] | None:
        """The new traverser; None: its idempotency key is taken, the Python rule decides."""
        audit_text, detail = _audit(None if audit is None else replace(audit, target=ident))
        params = (ident, target, input_json, node_id, max_attempts, idempotency_key, now, audit_text, detail)
        row = (await self._call(SQL_FN_SUBMIT, params, ident))[0]
        if row[0] == FALLBACK:
            return None
        return traverser_view(dict(zip(TRAVERSER_FIELDS, row[1:], strict=True)))

    async def claim(
        self, worker_id: str, limit: int, now: float, expires: float, silent_before: float
    ) -> list[dict[str, Any]]:
        rows = await self._call(SQL_FN_CLAIM, (worker_id, limit, now, expires, silent_before), None)
        if rows and rows[0][0] is None:
            raise NotFound.of("worker", worker_id)
        tasks: list[dict[str, Any]] = []
        for row in rows:
            traverser = dict(zip(TRAVERSER_FIELDS, row[:17], strict=True))
            checkpoints, steps, approvals = (loads(x) if x is not None else [] for x in row[17:])
            approval_rows = [_unhex(a, _APPROVAL_BYTES) for a in approvals]
            for a in approval_rows:
                self._remember(a["id"], traverser["id"])
            tasks.append(
                {
                    "traverser": traverser_view(traverser),
                    "epoch": traverser["epoch"],
                    "lease_expires_at": expires,
                    "lease_expires_at_iso": iso(expires),
                    "checkpoints": {
                        c["name"]: {
                            "value": fragment(bytes.fromhex(c["value"][2:])),
                            "revision": c["revision"],
                        }
                        for c in checkpoints
                    },
                    "steps": [step_view(_unhex(s, _STEP_BYTES)) for s in steps],
                    "approvals": [approval_view(a) for a in approval_rows],
                }
            )
        return tasks

    async def decision_terms(self, approval_id: str) -> tuple[bytes | None, bool] | None:
        """The approval's response schema and whether it is assigned; None: no such approval.
        Pipelined by the writer, so the event loop does not wait on the round trip."""
        rows = await self._call(SQL_DECISION_TERMS, (approval_id,), "")
        return None if not rows else (rows[0][0], bool(rows[0][1]))

    async def save_checkpoint(
        self,
        traverser_id: str,
        epoch: int,
        name: str,
        value: bytes,
        expected_revision: int | None,
        steps: Sequence[StepRecord],
        now: float,
    ) -> int:
        params = (traverser_id, epoch, name, value, expected_revision, now, *steps_params(steps))
        outcome = str((await self._call(SQL_FN_SAVE_CHECKPOINT, params, traverser_id))[0][0])
        if outcome.startswith("ok:"):
            return int(outcome[3:])
        if outcome.startswith("conflict:"):
            try:  # the kit's rule words the refusal
                check_revision(f"checkpoint {name!r}", expected_revision, int(outcome[9:]))
            except CheckpointConflictError as exc:
                raise Conflict(str(exc), "revision_conflict") from None
        _refuse(outcome, traverser_id)
        raise AssertionError  # unreachable

    async def request_approval(
        self,
        traverser_id: str,
        epoch: int | None,
        operation_key: str,
        prompt: bytes,
        checkpoint: bytes | None,
        expires_at: float | None,
        pause: bool,
        steps: Sequence[StepRecord],
        audit: AuditEntry | None,
        ident: str,
        now: float,
    ) -> tuple[dict[str, Any], bool] | None:
        """The approval and whether it paused; None: the Python rule decides (FALLBACK)."""
        audit_text, detail = _audit(None if audit is None else replace(audit, target=ident))
        params = (
            traverser_id, epoch, operation_key, prompt, checkpoint, expires_at, pause, ident, now,
            *steps_params(steps if epoch is not None else ()), audit_text, detail,
        )  # fmt: skip
        row = (await self._call(SQL_FN_REQUEST_APPROVAL, params, traverser_id))[0]
        outcome = str(row[0])
        if outcome == "ok":
            # The function serves requests without a response schema (the Python rule stores one).
            approval = dict(zip(APPROVAL_FIELDS, row[2:], strict=True), response_schema=None)
            self._remember(approval["id"], traverser_id)
            return approval_view(approval), bool(row[1])
        if outcome == FALLBACK:
            return None
        if outcome == "lease_required":
            raise Conflict("pausing a traverser requires its task lease (epoch)", "lease_required")
        if outcome.startswith("invalid_state:"):
            raise Conflict(f"traverser {traverser_id!r} is {outcome[14:]}", "invalid_state")
        _refuse(outcome, traverser_id)
        raise AssertionError  # unreachable

    async def decide(
        self,
        approval_id: str,
        decision: str,
        response: bytes | None,
        decided_by: str,
        audit: AuditEntry | None,
        now: float,
        *,
        plain: bool = False,
    ) -> tuple[dict[str, Any], str | None] | None:
        """The decided approval and the node to wake; None: the Python rule decides (FALLBACK),
        or with ``plain`` also when the approval has a response schema or an assignment (TERMS:
        the caller reads them and decides again without ``plain``)."""
        run_id = self._approval_runs.get(approval_id)
        if run_id is None:
            found = self._reader().execute(SQL_APPROVAL_RUN, (approval_id,)).fetchone()
            if found is None:
                raise NotFound.of("approval", approval_id)
            run_id = str(found[0])
            self._remember(approval_id, run_id)
        entry = None
        if audit is not None:  # the detail names the response stored, which is this one
            entry = replace(audit, detail={"decision": decision, "response": fragment(response)})
        audit_text, detail = _audit(entry)
        params = (approval_id, decision, response, decided_by, now, audit_text, detail)
        row = (await self._call(SQL_FN_DECIDE_PLAIN if plain else SQL_FN_DECIDE, params, run_id))[0]
        outcome = str(row[0])
        if outcome in ("ok", "same"):
            # The caller (Service.decide) read the approval's response schema before deciding,
            # or (plain) it has none.
            decided = dict(zip(APPROVAL_FIELDS, row[2:], strict=True), response_schema=None)
            return approval_view(decided), row[1]
        if outcome in (FALLBACK, TERMS):
            return None
        if outcome == "missing":
            raise NotFound.of("approval", approval_id)
        if outcome == "decided:pending":
            raise Conflict(f"approval {approval_id!r} is no longer pending", "approval_decided")
        if outcome.startswith("decided:"):
            raise Conflict(f"approval {approval_id!r} is already {outcome[8:]}", "approval_decided")
        raise RuntimeError(f"unexpected outcome {outcome!r} of a decision")

    async def end_attempt(
        self,
        traverser_id: str,
        epoch: int,
        outcome: str,
        value: bytes | None,
        retryable: bool,
        steps: Sequence[StepRecord],
        now: float,
    ) -> str:
        """Complete (``succeeded``), fail (``failed``) or release (``released``) an attempt; the
        traverser's new status."""
        params = (traverser_id, epoch, outcome, value, retryable, now, *steps_params(steps))
        status = str((await self._call(SQL_FN_END_ATTEMPT, params, traverser_id))[0][0])
        if status in ("succeeded", "queued", "failed"):
            return status
        _refuse(status, traverser_id)
        raise AssertionError  # unreachable
