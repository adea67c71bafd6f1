"""HTTP API v2: every run in the database, of either kind, and the one inbox.

``GET /runs`` lists pyworkflow's own runs (kind ``workflow``) beside traversers (kind
``traverser``) newest first; ``GET /runs/{id}`` shows one with its steps, waits, checkpoints and
event log; ``POST /runs`` starts a pyworkflow run by workflow name (``Service.start_run``);
``GET /inbox`` lists pending approvals, hooks and step hooks together, oldest first,
each with its run's summary; ``GET /ids`` resolves an id prefix. Read-only (``_runs_reads``), but
for an operator's transitions of a run of either kind: ``POST /runs/{id}/retry``, a new attempt
of a failed run (``Service.retry``), and ``POST /runs/{id}/cancel`` with a reason
(``Service.cancel_run``); permissions in ``_auth.RULES``."""

from __future__ import annotations

from enum import StrEnum
from typing import Annotated, Any

from fastapi import APIRouter, Depends, Query, Request, Response

from pyworkflow import MAX_WORKFLOW_NAME, WORKFLOW_NAME_PATTERN, ConfigurationError, check_workflow_name

from . import _body_schema as B
from . import _schemas as S
from ._auth import Principal, caller
from ._body import MAX_KEY, Fields, parse_object, read_json, read_raw
from ._errors import bad_request
from ._paging import After, Limit, decode, page
from ._routes import CreatedAfter, CreatedBefore, ok, service_of, store_of
from ._runs_reads import RUN_PART_LIMIT, RUN_STATUSES

router = APIRouter(prefix="/api/v2")


class RunKind(StrEnum):
    """Which runs a listing shows."""

    ALL = "all"
    WORKFLOW = "workflow"
    TRAVERSER = "traverser"


#: A status filter: the engine's name (pending, running, suspended, completed, failed, cancelled)
#: or the API's name of a traverser status (queued, waiting, succeeded).
class RunStatusFilter(StrEnum):
    PENDING = "pending"
    RUNNING = "running"
    SUSPENDED = "suspended"
    COMPLETED = "completed"
    FAILED = "failed"
    CANCELLED = "cancelled"
    QUEUED = "queued"
    WAITING = "waiting"
    SUCCEEDED = "succeeded"


assert {s.value for s in RunStatusFilter} == set(RUN_STATUSES)
assert RUN_PART_LIMIT == 1000  # as get_run's description says


@router.get("/runs", response_model=S.RunList)
async def list_runs(
    request: Request,
    kind: Annotated[
        RunKind, Query(description="all, workflow (pyworkflow's own) or traverser")
    ] = RunKind.ALL,
    status: Annotated[
        list[RunStatusFilter] | None,
        Query(
            description="the engine's status, or a traverser's API name (queued, waiting, succeeded); "
            "repeat it for several",
            max_length=len(RunStatusFilter),
        ),
    ] = None,
    target: Annotated[str | None, Query(max_length=MAX_KEY, description="a workflow, or node.skill")] = None,
    id_prefix: Annotated[
        str | None, Query(min_length=1, max_length=200, description="ids starting so")
    ] = None,
    created_after: CreatedAfter = None,
    created_before: CreatedBefore = None,
    limit: Limit = 100,
    after: After = None,
) -> Response:
    """Every run in this database, newest first: pyworkflow's own runs (``kind: workflow``) and
    traversers (``kind: traverser``, with ``target``, ``node_id``, ``attempt``, ``max_attempts`` and
    ``traverser_status``, the API's name of its status). ``status`` is the engine's status."""
    items = store_of(request).list_runs(
        kind.value,
        [s.value for s in status or ()],
        limit + 1,
        target=target,
        id_prefix=id_prefix,
        created_after=created_after,
        created_before=created_before,
        after=decode("runs", after),
    )
    return ok(page("runs", items, limit))


#: The fields of ``POST /runs``; any other is refused (a misspelt ``input`` would otherwise
#: start a run without its arguments).
_START_FIELDS: dict[str, Any] = {
    "workflow": {
        "type": "string",
        "minLength": 1,
        "maxLength": MAX_WORKFLOW_NAME,
        "pattern": WORKFLOW_NAME_PATTERN,
        "description": "the name the workflow is registered under (@workflow(name=...), or module:qualname)",
    },
    "input": {
        "type": "object",
        "additionalProperties": B.JSON,
        "description": "the workflow's keyword arguments",
    },
}


def _start_body() -> dict[str, Any]:
    """The body of ``POST /runs`` as the document states it: only these fields."""
    doc = B.body(_START_FIELDS, ["workflow"])
    doc["requestBody"]["content"]["application/json"]["schema"]["additionalProperties"] = False
    return doc


@router.post(
    "/runs",
    status_code=201,
    response_model=S.Run,
    openapi_extra=_start_body(),
)
async def start(request: Request, who: Annotated[Principal, Depends(caller)]) -> Response:
    """Start a pyworkflow run of the workflow registered as ``workflow``, with ``input`` as its
    keyword arguments (default ``{}``), by name as Temporal starts a workflow by type: it is
    recorded due now, and whichever pyworkflow runtime serving this database has that workflow
    registered runs it (the local runtime, ``pyworkflow.serve()``, polls for it; the Celery
    runtime's sweeper publishes it). Nothing here knows which workflows those processes
    register: a process that has not registered the name fails the run with
    ``WorkflowNotFoundError`` (retry it once one that has is serving). Answers 201 with the run
    as ``GET /runs/{id}`` shows it (``kind: workflow``). Other fields are refused; there is no
    idempotency key: a repeated request starts another run."""
    f = Fields(await read_json(request))
    unknown = sorted(set(f.data) - set(_START_FIELDS))
    if unknown:
        raise bad_request(f"body.{unknown[0]}: unknown field; a run's start takes workflow and input")
    workflow = f.data.get("workflow")
    if workflow is None:
        raise bad_request("body.workflow is required")
    try:
        check_workflow_name(workflow)
    except ConfigurationError as exc:
        raise bad_request(f"body.workflow: {exc}") from None
    inputs = f.obj("input", required=False)
    return ok(await service_of(request).start_run(who, workflow, inputs or {}), 201)


@router.get("/runs/{run_id}", response_model=S.RunRecord)
async def get_run(request: Request, run_id: str) -> Response:
    """One run of either kind: the run (with ``input``, ``result``, ``error``), its ``steps``,
    its ``waits`` (hooks, step hooks, timers, retries, approvals), its ``checkpoints`` (every
    scope) and its ``events`` (pyworkflow's event log), at most 1000 of each; ``truncated``
    names the parts that had more."""
    return ok(await store_of(request).get_run(run_id))


@router.get("/inbox", response_model=S.Inbox)
async def inbox(request: Request, limit: Limit = 100, after: After = None) -> Response:
    """What people answer, in one list: pending approvals, pyworkflow hooks and step hooks,
    oldest first, each with its run's summary (``run``). An approval carries its ``prompt`` and
    ``checkpoint``; a hook its ``payload_schema``. Decide with ``POST /approvals/{id}/decide``,
    resume with ``POST /hooks/{id}/resume``."""
    return ok(page("inbox", store_of(request).inbox(limit + 1, after=decode("inbox", after)), limit))


@router.post("/runs/{run_id}/retry", response_model=S.Traverser | S.RunSummary)
async def retry(request: Request, run_id: str, who: Annotated[Principal, Depends(caller)]) -> Response:
    """A new attempt of a failed run of either kind: a traverser from its checkpoints, recorded
    steps and decided approvals (answers with its traverser view); a pyworkflow run from what it
    recorded, its completed steps replayed and the failed one run again by the pyworkflow runtime
    serving this database (answers with its run summary). ``409 invalid_state`` unless it
    failed."""
    return ok(await service_of(request).retry(who, run_id))


#: The longest reason a cancellation may carry.
MAX_REASON = 1000


@router.post("/runs/{run_id}/cancel", response_model=S.RunSummary)
async def cancel(request: Request, run_id: str, who: Annotated[Principal, Depends(caller)]) -> Response:
    """Cancel a run of either kind that has not finished; body ``{"reason": "..."}`` (optional,
    at most 1000 characters), kept in the run's error and the audit entry. Its pending waits are
    cancelled. A run that had finished is returned unchanged. Answers with the run's summary."""
    raw = await read_raw(request)
    reason = parse_object(raw).get("reason") if raw.strip() else None
    if reason is not None and (
        not isinstance(reason, str) or not 0 < len(reason) <= MAX_REASON or "\x00" in reason
    ):
        raise bad_request(f"body.reason must be a non-empty string of at most {MAX_REASON} characters")
    return ok(await service_of(request).cancel_run(who, run_id, reason))


class IdKind(StrEnum):
    """What an id prefix is looked up among."""

    RUN = "run"
    APPROVAL = "approval"
    WAIT = "wait"


@router.get("/ids", response_model=S.IdList)
async def resolve_ids(
    request: Request,
    prefix: Annotated[str, Query(min_length=1, max_length=200)],
    kind: Annotated[
        IdKind, Query(description="run (either kind), approval, or wait (any kind)")
    ] = IdKind.RUN,
) -> Response:
    """The ids that start with ``prefix`` (at most 10, in id order; ``more`` when there are
    others): how the CLI accepts an unambiguous id prefix and lists the candidates of an
    ambiguous one."""
    if "\x00" in prefix:
        raise bad_request("prefix must not contain NUL characters")
    ids, more = store_of(request).ids_with_prefix(kind.value, prefix)
    return ok({"items": ids, "more": more})
