"""HTTP API v2. Bodies are read by hand (see ``_body``) so size, depth and type errors share one
JSON shape; responses embed stored JSON bytes as they are (orjson fragments)."""

from __future__ import annotations

import time
from typing import Annotated, Any, Literal, get_args

import orjson
from fastapi import APIRouter, Depends, Query, Request, Response

from .._json import dumps_read
from .._models import DECISIONS, ApprovalStatus, TraverserStatus
from . import _body_schema as B
from . import _schemas as S
from ._assign import ASSIGN_SCHEMA, ESCALATE_SCHEMA, parse_assignees, parse_escalation, read_assignment
from ._auth import Principal, as_worker, caller, under_lease
from ._body import MAX_KEY, Fields, error_info, read_json
from ._errors import RETRY_AFTER_SECONDS, ApiError, bad_request
from ._graph_rows import new_id
from ._hub import Hub, Listener, node_key, traverser_key
from ._links import MAX_LABEL, MAX_LINK_SECONDS
from ._paging import After, Limit, decode, page
from ._refusals import Invalid, NotFound, Refusal
from ._service import LinkRequest, Service
from ._store import GraphStore
from ._urls import link_url

router = APIRouter(prefix="/api/v2")

_MAX_CLAIM_WAIT = 30.0
MAX_CLIENT_WAIT = 60.0
#: Bounds of single fields (checked where the field is read; declared with it in the OpenAPI
#: document from the same constants).
MAX_ATTEMPTS = 1000
MAX_CLAIM = 100
MAX_EXPIRY_SECONDS = 10 * 365 * 86400
MAX_LEASES = 10_000
#: The approval inbox's status filter: a status, or every one.
ApprovalFilter = Literal["pending", "approved", "rejected", "expired", "all"]
assert set(get_args(ApprovalFilter)) == {s.value for s in ApprovalStatus} | {"all"}
#: The time range of a listing (Unix seconds, UTC).
CreatedAfter = Annotated[float | None, Query(ge=0, description="created at or after (Unix seconds)")]
CreatedBefore = Annotated[float | None, Query(ge=0, description="created before (Unix seconds)")]
_WAIT_FOR_DOC = "statuses to wait for, comma-separated, or 'terminal'"
_WAIT_FOR_WORD = "(" + "|".join([*(s.value for s in TraverserStatus), "terminal"]) + ")"
#: What ``_parse_statuses`` reads: statuses (or terminal), comma-separated, spaces around each.
WAIT_FOR_PATTERN = f"^( *{_WAIT_FOR_WORD} *(, *{_WAIT_FOR_WORD} *)*)?$"


def ok(value: Any, status: int = 200) -> Response:
    return Response(orjson.dumps(value), status_code=status, media_type="application/json")


def error_response(status: int, code: str, message: str) -> Response:
    """The one error shape of the API."""
    body = orjson.dumps({"error": {"code": code, "message": message}})
    return Response(body, status_code=status, media_type="application/json")


def unavailable_response(exc: ApiError) -> Response:
    """A 503 in the one error shape, with Retry-After."""
    response = error_response(exc.status, exc.code, exc.message)
    response.headers["Retry-After"] = str(RETRY_AFTER_SECONDS)
    return response


# The body schemas' building blocks (``_body_schema``), under the names the routes use.
_doc = B.body
_number = B.number
_integer = B.integer
_ANY = B.JSON
_STR = B.KEY
_INT = B.INT
_STEPS = B.STEPS
_ERROR = B.ERROR
#: The lease rules of a write on the traverser its path names.
_PATH_LEASE = B.lease_rules(None)


def store_of(request: Request) -> GraphStore:
    store: GraphStore = request.app.state.store
    return store


def hub_of(request: Request) -> Hub:
    hub: Hub = request.app.state.hub
    return hub


def service_of(request: Request) -> Service:
    service: Service = request.app.state.service
    return service


# -- traversers -------------------------------------------------------------------------------


@router.post(
    "/traversers",
    status_code=201,
    response_model=S.Traverser,
    responses={200: {"model": S.Traverser, "description": "a repeated idempotency_key: the first traverser"}},
    openapi_extra=_doc(
        {
            "target": {**_STR, "pattern": "^[^.\\u0000]+\\.[^\\u0000]+$", "description": "node.skill"},
            "input": {"type": "object", "additionalProperties": _ANY},
            "max_attempts": _integer(1, MAX_ATTEMPTS),
            "wait_for": {**_STR, "pattern": WAIT_FOR_PATTERN},
            "wait_seconds": _number(MAX_CLIENT_WAIT),
            "idempotency_key": _STR,
            "parent_id": _STR,
            "epoch": _INT,
            "worker_id": _STR,
        },
        ["target"],
        B.lease_rules("parent_id"),
    ),
)
async def submit(request: Request, who: Annotated[Principal, Depends(caller)]) -> Response:
    """Submit a traverser: run skill ``node.skill`` with ``input`` as keyword arguments. With
    ``wait_for`` and ``wait_seconds`` the answer comes once it reaches one of those statuses
    (as ``GET /traversers/{id}?wait_for=`` would), or after that many seconds. A repeated
    ``idempotency_key`` answers 200 with the traverser it created first. A handler's child step
    names its parent's lease (``parent_id``, ``epoch``, ``worker_id``; a worker submits nothing
    else) and its key is ``child:<parent_id>:<step>``."""
    f = Fields(await read_json(request))
    parent = await under_lease(request, f.lease("parent_id"))
    target = f.key("target")
    node, dot, skill = target.partition(".")
    if not dot or not node or not skill:
        raise bad_request("body.target must look like 'node.skill'")
    inputs = f.obj("input", required=False)
    input_json = b"{}" if inputs is None else dumps_read(inputs)
    max_attempts = f.integer("max_attempts", required=False, minimum=1, maximum=MAX_ATTEMPTS) or 3
    wanted = _parse_statuses(f.key("wait_for", required=False))
    wait = f.number("wait_seconds", required=False, maximum=MAX_CLIENT_WAIT) or 0.0
    key = f.key("idempotency_key", required=False)
    if not wanted or wait <= 0:
        view, created = await service_of(request).submit(who, target, input_json, max_attempts, key, parent)
        return ok(view, 201 if created else 200)
    # Submit-and-follow: one round trip instead of two for callers that wait anyway. Subscribed
    # under the new traverser's id before it is committed, so the submission's own answer is
    # the first view (no read): every later transition notifies after it.
    hub, ident = hub_of(request), new_id()
    listener = hub.subscribe(traverser_key(ident))
    try:
        view, created = await service_of(request).submit(
            who, target, input_json, max_attempts, key, parent, ident=ident
        )
    except BaseException:
        hub.unsubscribe(traverser_key(ident), listener)
        raise
    if not created:  # an earlier submission's traverser, as it was read: follow it afresh
        hub.unsubscribe(traverser_key(ident), listener)
        return await _follow(request, view["id"], wanted, wait, 200)
    return await _follow(request, ident, wanted, wait, 201, (listener, view))


@router.get("/traversers", response_model=S.TraverserList)
async def list_traversers(
    request: Request,
    status: Annotated[TraverserStatus, Query()] = TraverserStatus.WAITING,
    limit: Limit = 100,
    after: After = None,
) -> Response:
    """Traversers in one status, newest first (``atfg ps`` shows ``waiting`` ones), a page at a
    time (``next_cursor``)."""
    items = store_of(request).list_traversers(status.value, limit + 1, decode("traversers", after))
    return ok(page("traversers", items, limit))


@router.get("/traversers/{traverser_id}", response_model=S.Traverser)
async def get_traverser(
    request: Request,
    traverser_id: str,
    wait_for: Annotated[
        str | None, Query(max_length=200, pattern=WAIT_FOR_PATTERN, description=_WAIT_FOR_DOC)
    ] = None,
    timeout: Annotated[float, Query(ge=0.0, le=MAX_CLIENT_WAIT)] = 0.0,
) -> Response:
    """One traverser. With ``wait_for``, a long poll: answers as soon as the status is one of
    those listed (``terminal`` = succeeded, failed or cancelled) or after ``timeout`` seconds."""
    return await _follow(request, traverser_id, _parse_statuses(wait_for), timeout, 200)


async def _follow(
    request: Request,
    traverser_id: str,
    wanted: set[str],
    timeout: float,
    code: int,
    subscribed: tuple[Listener, dict[str, Any]] | None = None,
) -> Response:
    """Answer with the traverser once its status is in ``wanted`` (at once if empty), or at the
    deadline with whatever it is then. Woken by a transition, it reads the traverser again
    unless the transition said its status and that status is not wanted (a claim's "running"
    for a client waiting for "waiting"): the reads of a poll are the first, the last and one per
    notification whose status it cannot rule out. ``subscribed``: a listener on the traverser
    that was subscribed before the transaction that wrote ``view`` committed, which then stands
    for the first read (a new submission's)."""
    store, hub = store_of(request), hub_of(request)
    key = traverser_key(traverser_id)
    deadline = time.monotonic() + timeout
    listener = hub.subscribe(key) if subscribed is None else subscribed[0]
    try:
        if subscribed is None:
            view, fresh = await store.read_traverser(traverser_id), True
        else:
            view, fresh = subscribed[1], True
        while True:
            remaining = deadline - time.monotonic()
            if not wanted or view["status"] in wanted:
                return ok(view, code)
            if remaining <= 0 or hub.closing:  # whatever it is now: not a view a wake-up skipped
                return ok(view if fresh else await store.read_traverser(traverser_id), code)
            if not await hub.wait(listener, remaining):
                return ok(await store.read_traverser(traverser_id), code)
            fresh = any(status is None or status in wanted for status in hub.take(listener))
            if fresh:
                view = await store.read_traverser(traverser_id)
    finally:
        hub.unsubscribe(key, listener)


def _parse_statuses(raw: str | None) -> set[str]:
    if not raw:
        return set()
    wanted: set[str] = set()
    for part in raw.split(","):
        part = part.strip(" ")
        if part == "terminal":
            wanted |= {s.value for s in TraverserStatus if s.is_terminal}
        elif part in TraverserStatus.__members__.values():
            wanted.add(part)
        else:
            raise bad_request(f"wait_for: unknown status {part!r}")
    return wanted


@router.get("/traversers/{traverser_id}/path", response_model=S.TraverserPath)
async def get_path(request: Request, traverser_id: str) -> Response:
    """The traverser and its child steps, in order."""
    return ok(store_of(request).path(traverser_id))


@router.post("/traversers/{traverser_id}/cancel", response_model=S.Traverser)
async def cancel(request: Request, traverser_id: str, who: Annotated[Principal, Depends(caller)]) -> Response:
    return ok(await service_of(request).cancel(who, traverser_id))


_LEASED = {"epoch": _INT, "worker_id": _STR, "steps": _STEPS}
#: The next tasks a report that frees a permit may ask for (see next_claim).
_NEXT_CLAIM = B.obj(
    {"worker_id": _STR, "max": _integer(1, MAX_CLAIM), "wait_seconds": _number(_MAX_CLAIM_WAIT)},
    ["worker_id", "max"],
)


@router.post(
    "/traversers/{traverser_id}/complete",
    response_model=S.Reported,
    openapi_extra=_doc({**_LEASED, "result": _ANY, "claim": _NEXT_CLAIM}, ["epoch"], _PATH_LEASE),
)
async def complete(request: Request, traverser_id: str) -> Response:
    """A worker reports the handler's result (under its lease)."""
    f = Fields(await read_json(request))
    await under_lease(request, f.lease(traverser_id=traverser_id))
    result = f.json("result", required=False) or b"null"
    wanted = await next_claim(request, f)
    await store_of(request).complete(traverser_id, f.integer("epoch"), result, f.steps())
    hub_of(request).notify(traverser_key(traverser_id), TraverserStatus.SUCCEEDED.value)
    return ok({"status": TraverserStatus.SUCCEEDED.value, "tasks": await hand_out(request, wanted)})


@router.post(
    "/traversers/{traverser_id}/fail",
    response_model=S.Reported,
    openapi_extra=_doc(
        {**_LEASED, "error": _ERROR, "retryable": {"type": "boolean"}}, ["epoch", "error"], _PATH_LEASE
    ),
)
async def fail(request: Request, traverser_id: str) -> Response:
    """A worker reports the handler's error; retried while attempts remain if ``retryable``."""
    f = Fields(await read_json(request))
    await under_lease(request, f.lease(traverser_id=traverser_id))
    error = dumps_read(error_info(Fields(f.obj("error"), "body.error")))
    store = store_of(request)
    status = await store.fail(
        traverser_id, f.integer("epoch"), error, f.boolean("retryable", False), f.steps()
    )
    _after_change(request, traverser_id, status)
    return ok({"status": status})


@router.post(
    "/traversers/{traverser_id}/release",
    response_model=S.Reported,
    openapi_extra=_doc(_LEASED, ["epoch"], _PATH_LEASE),
)
async def release(request: Request, traverser_id: str) -> Response:
    """A stopping worker gives a lease back; the attempt is not charged."""
    f = Fields(await read_json(request))
    await under_lease(request, f.lease(traverser_id=traverser_id))
    await store_of(request).release(traverser_id, f.integer("epoch"), f.steps())
    _after_change(request, traverser_id, TraverserStatus.QUEUED.value)
    return ok({"status": TraverserStatus.QUEUED.value})


def _after_change(request: Request, traverser_id: str, status: str) -> None:
    hub = hub_of(request)
    hub.notify(traverser_key(traverser_id))
    if status == TraverserStatus.QUEUED:
        node = store_of(request).get_traverser(traverser_id)["node_id"]
        hub.notify(node_key(node), queued=1)


@router.get("/traversers/{traverser_id}/checkpoints/{name}", response_model=S.Checkpoint)
async def get_checkpoint(
    request: Request,
    traverser_id: str,
    name: str,
    epoch: Annotated[int | None, Query(ge=0, description="the task lease a worker reads under")] = None,
    worker_id: Annotated[str | None, Query(max_length=200, description="the worker holding it")] = None,
) -> Response:
    query = Fields({"epoch": epoch, "worker_id": worker_id}, "query")
    await under_lease(request, query.lease(traverser_id=traverser_id), read=True)
    return ok(store_of(request).get_checkpoint(traverser_id, name))


@router.put(
    "/traversers/{traverser_id}/checkpoints/{name}",
    response_model=S.CheckpointSaved,
    openapi_extra=_doc(
        {**_LEASED, "value": B.PRESENT, "expected_revision": _INT}, ["epoch", "value"], _PATH_LEASE
    ),
)
async def put_checkpoint(request: Request, traverser_id: str, name: str) -> Response:
    """Save a checkpoint under the task lease; ``expected_revision`` 0 creates only if absent."""
    f = Fields(await read_json(request))
    await under_lease(request, f.lease(traverser_id=traverser_id))
    value = f.json("value")
    assert value is not None
    revision = await store_of(request).save_checkpoint(
        traverser_id,
        f.integer("epoch"),
        name,
        value,
        f.integer("expected_revision", required=False),
        f.steps(),
    )
    return ok({"traverser_id": traverser_id, "name": name, "revision": revision})


# -- approvals --------------------------------------------------------------------------------


@router.post(
    "/approvals",
    response_model=S.ApprovalRequested,
    openapi_extra=_doc(
        {
            **_LEASED,
            "traverser_id": _STR,
            "operation_key": _STR,
            "prompt": B.PRESENT,
            "checkpoint": _ANY,
            "expires_in_seconds": _number(MAX_EXPIRY_SECONDS),
            "pause": {"type": "boolean"},
            "claim": _NEXT_CLAIM,
            "response_schema": {
                "type": "object",
                "additionalProperties": _ANY,
                "description": "a JSON Schema (Draft 2020-12) an approving response must match",
            },
            "assign_to": ASSIGN_SCHEMA,
            "escalate": ESCALATE_SCHEMA,
            "decision_link": {
                "description": "mint a decision link with the approval: true, or its settings",
                "oneOf": [
                    {"type": "boolean"},
                    {
                        "type": "object",
                        "additionalProperties": False,
                        "properties": {
                            "expires_in_seconds": B.number(MAX_LINK_SECONDS, positive=True),
                            "label": B.text(MAX_LABEL),
                        },
                    },
                ],
            },
        },
        ["traverser_id", "operation_key", "prompt"],
        B.lease_rules("traverser_id", paired=False),
    ),
)
async def request_approval(request: Request, who: Annotated[Principal, Depends(caller)]) -> Response:
    """Find or create the approval (traverser_id, operation_key). With ``pause`` (the default,
    which needs the task lease) a pending approval also closes the lease and parks the traverser.
    ``decision_link`` (``true``, or ``{"expires_in_seconds", "label"}``) mints a single-use
    decision link with the approval, in its transaction: its ``url`` is in this answer only
    (``decision_link``), and only in the answer that created the approval."""
    f = Fields(await read_json(request))
    lease = await under_lease(request, f.lease(paired=False))
    traverser_id = f.key("traverser_id")
    prompt = f.json("prompt")
    assert prompt is not None
    wanted = await next_claim(request, f)
    approval, paused, minted = await service_of(request).request_approval(
        who,
        traverser_id,
        None if lease is None else lease.epoch,
        f.key("operation_key"),
        prompt,
        f.json("checkpoint", required=False),
        f.number("expires_in_seconds", required=False, maximum=MAX_EXPIRY_SECONDS),
        f.boolean("pause", True),
        f.steps(),
        f.json("response_schema", required=False),
        parse_assignees(f.data.get("assign_to"), "body.assign_to"),
        parse_escalation(f.data.get("escalate")),
        parse_link_request(f.data.get("decision_link")),
    )
    # The pause frees the worker's permit: its next task may come with this answer. Not after a
    # wait when the answer carries a new decision link: its URL is in this answer only, and the
    # handler hands it on as soon as the answer comes.
    if wanted is not None and minted is not None:
        wanted = (wanted[0], wanted[1], 0.0)
    tasks = await hand_out(request, wanted) if paused else []
    answer: dict[str, Any] = {"approval": approval, "paused": paused, "tasks": tasks}
    if minted is not None:
        link, secret = minted
        answer["decision_link"] = {"url": link_url(request, link, secret), "link": link.as_json()}
    return ok(answer)


def parse_link_request(value: Any, where: str = "body.decision_link") -> LinkRequest | None:
    """``decision_link``: absent, null or false (none), true (the defaults), or an object with
    ``expires_in_seconds`` and ``label``; ``Invalid`` otherwise."""
    if value is None or value is False:
        return None
    if value is True:
        return LinkRequest()
    if not isinstance(value, dict) or set(value) - {"expires_in_seconds", "label"}:
        raise Invalid(
            f"{where} must be true, false or an object with 'expires_in_seconds' and/or 'label'",
            "validation_error",
        )
    seconds, label = value.get("expires_in_seconds"), value.get("label")
    if seconds is not None and (isinstance(seconds, bool) or not isinstance(seconds, int | float)):
        raise Invalid(f"{where}.expires_in_seconds must be a number of seconds", "validation_error")
    if label is not None and not isinstance(label, str):
        raise Invalid(f"{where}.label must be a string", "validation_error")
    return LinkRequest(None if seconds is None else float(seconds), label)


@router.get("/approvals", response_model=S.ApprovalList)
async def list_approvals(
    request: Request,
    status: Annotated[ApprovalFilter, Query(description="an approval status, or all")] = "pending",
    traverser_id: Annotated[str | None, Query(max_length=200)] = None,
    operation_key: Annotated[str | None, Query(max_length=MAX_KEY)] = None,
    created_after: CreatedAfter = None,
    created_before: CreatedBefore = None,
    limit: Limit = 100,
    after: After = None,
) -> Response:
    """The approval inbox: pending approvals, oldest first, unless ``status`` says otherwise; of
    one traverser and operation key, and created in a time range, when asked; a page at a time."""
    items = store_of(request).list_approvals(
        None if status == "all" else status,
        traverser_id,
        limit + 1,
        operation_key=operation_key,
        created_after=created_after,
        created_before=created_before,
        after=decode("approvals", after),
    )
    return ok(page("approvals", items, limit))


@router.get("/approvals/{approval_id}", response_model=S.Approval)
async def get_approval(request: Request, approval_id: str) -> Response:
    """One approval, with ``assignment`` (who may decide it, and its escalation) when it has one."""
    store = store_of(request)
    approval = store.get_approval(approval_id)
    assignment = store.db.read(lambda conn: read_assignment(conn, approval_id))
    return ok(approval if assignment is None else {**approval, "assignment": assignment})


@router.post(
    "/approvals/{approval_id}/decide",
    response_model=S.Approval,
    openapi_extra=_doc({"decision": {"enum": sorted(DECISIONS)}, "response": _ANY}, ["decision"]),
)
async def decide(request: Request, approval_id: str, who: Annotated[Principal, Depends(caller)]) -> Response:
    """Record ``approved`` or ``rejected``; the paused traverser continues. The same decision
    again is idempotent; a different one is ``409 approval_decided``."""
    f = Fields(await read_json(request))
    decision = f.key("decision")
    if decision not in DECISIONS:
        raise bad_request("body.decision must be 'approved' or 'rejected'")
    return ok(await service_of(request).decide(who, approval_id, decision, f.json("response", False)))


# -- workers ----------------------------------------------------------------------------------


@router.post(
    "/workers",
    status_code=201,
    response_model=S.WorkerRegistered,
    openapi_extra=_doc(
        {"node_id": _STR, "version": _STR, "capacity": _integer(1)}, ["node_id", "version", "capacity"]
    ),
)
async def register_worker(request: Request) -> Response:
    f = Fields(await read_json(request))
    node = f.key("node_id")
    if "." in node:
        raise bad_request("body.node_id must not contain '.'")
    store = store_of(request)
    who = await caller(request)
    view = await store.register_worker(node, f.key("version"), f.integer("capacity", minimum=1), who.id)
    # The worker paces its heartbeats from this (a third of a lease) before its first claim.
    return ok({**view, "lease_seconds": store.lease_seconds}, 201)


@router.get("/workers", response_model=S.WorkerList)
async def list_workers(request: Request, limit: Limit = 100, after: After = None) -> Response:
    """Registered workers, newest first, a page at a time."""
    items = store_of(request).list_workers(limit + 1, decode("workers", after))
    return ok(page("workers", items, limit, ("registered_at", "id")))


@router.get("/workers/{worker_id}", response_model=S.Worker)
async def get_worker(request: Request, worker_id: str) -> Response:
    return ok(store_of(request).get_worker(worker_id))


@router.post(
    "/workers/{worker_id}/claim",
    response_model=S.Claimed,
    openapi_extra=_doc({"max": _integer(1, MAX_CLAIM), "wait_seconds": _number(_MAX_CLAIM_WAIT)}, ["max"]),
)
async def claim(request: Request, worker_id: str) -> Response:
    """Lease up to ``max`` tasks for this worker's (node, version); a long poll of up to
    ``wait_seconds`` that answers the moment work is queued for the node."""
    f = Fields(await read_json(request))
    limit = f.integer("max", minimum=1, maximum=MAX_CLAIM)
    wait = f.number("wait_seconds", required=False, maximum=_MAX_CLAIM_WAIT) or 0.0
    await as_worker(request, worker_id)
    tasks = await _lease_tasks(request, worker_id, limit, wait, alone=True)
    return ok({"tasks": tasks, "lease_seconds": store_of(request).lease_seconds})


async def _lease_tasks(
    request: Request, worker_id: str, limit: int, wait: float, *, alone: bool = False
) -> list[dict[str, Any]]:
    """Lease up to ``limit`` tasks of the worker's node, waiting up to ``wait`` seconds for work to
    be queued: the one rule of a claim, whether it is a request of its own (``alone``) or rides
    on a report. A claim riding on a report does not read the node's queue while the hub's count
    says nothing is queued that another poll is not already on its way to claim (the hub's hint):
    it answers at once without a wait, or waits to be woken. A worker that went away mid-poll is
    handed nothing."""
    store, hub = store_of(request), hub_of(request)
    key = node_key(store.worker_node(worker_id))
    version = store.worker_version(worker_id)
    if not alone and wait <= 0 and not hub.may_have_work(key, version=version):
        return []
    deadline = time.monotonic() + wait
    tasks: list[dict[str, Any]] = []
    # Subscribed before the store is read: work queued from here on wakes the wait. A
    # notification this poll did not answer with a claim goes on to another poll when it leaves.
    listener = hub.subscribe(key, ride=not alone, version=version)
    try:
        first = True
        while True:
            if (alone or wait > 0) and await request.is_disconnected():
                return []
            if alone or not first or hub.may_have_work(key, listener):
                hub.take(listener)  # what woke this poll is answered by this claim
                generation = hub.generation(key)
                tasks = await store.claim(worker_id, limit)
                hub.claimed(key, listener, generation, limit, len(tasks))  # wakes more if owed
            first = False
            remaining = deadline - time.monotonic()
            if tasks or remaining <= 0 or hub.closing:
                break
            await hub.wait(listener, min(remaining, 5.0))
    finally:
        hub.unsubscribe(key, listener)
    _announce(hub, tasks)
    return tasks


async def next_claim(request: Request, f: Fields) -> tuple[str, int, float] | None:
    """The optional ``claim`` of a worker's report that frees a permit (a completion, a pause):
    ``{"worker_id": ..., "max": n, "wait_seconds": w}`` asks for up to n tasks in the answer, so
    that a worker needs no claim request of its own between tasks. With ``wait_seconds`` the
    answer comes once a task is queued or after that long, as a claim's long poll (the report
    itself is committed first, and the traverser's followers are told at once). Checked before
    anything changes."""
    raw = f.obj("claim", required=False)
    if raw is None:
        return None
    g = Fields(raw, "body.claim")
    worker_id = g.key("worker_id")
    limit = g.integer("max", minimum=1, maximum=MAX_CLAIM)
    wait = g.number("wait_seconds", required=False, maximum=_MAX_CLAIM_WAIT) or 0.0
    try:
        await as_worker(request, worker_id)  # another credential's worker: 403 before any change
    except NotFound:
        pass  # an unknown worker: the report stands and hand_out gives it nothing
    return worker_id, limit, wait


async def hand_out(request: Request, wanted: tuple[str, int, float] | None) -> list[dict[str, Any]]:
    """Lease what ``wanted`` asks for (see next_claim). The report it rides on has already
    committed, so a refusal here (an unknown worker) only means no task comes with it."""
    if wanted is None:
        return []
    worker_id, limit, wait = wanted
    try:
        return await _lease_tasks(request, worker_id, limit, wait)
    except Refusal:
        return []


def _announce(hub: Hub, tasks: list[dict[str, Any]]) -> None:
    for task in tasks:  # clients following a traverser see it running
        hub.notify(traverser_key(task["traverser"]["id"]), TraverserStatus.RUNNING.value)


@router.post("/workers/{worker_id}/release", response_model=S.WorkerReleased)
async def release_worker(request: Request, worker_id: str) -> Response:
    """A stopping worker gives back whatever it still holds (attempts not charged)."""
    store = store_of(request)
    await as_worker(request, worker_id)  # 404 for an unknown worker
    nodes = await store.release_all(worker_id)
    for node in nodes:
        hub_of(request).notify(node_key(node))
    return ok({"released_nodes": nodes})


@router.post(
    "/workers/{worker_id}/heartbeat",
    response_model=S.Heartbeat,
    openapi_extra=_doc(
        {
            "leases": {
                "type": "array",
                "maxItems": MAX_LEASES,
                "items": B.obj({"id": _STR, "epoch": _INT}, ["id", "epoch"]),
            },
            "stats": {"type": "object", "additionalProperties": _ANY},
        },
        [],
    ),
)
async def heartbeat(request: Request, worker_id: str) -> Response:
    """Extend the worker's leases and record its counters; answers the leases it lost."""
    f = Fields(await read_json(request))
    raw = f.data.get("leases")
    raw = [] if raw is None else raw
    if not isinstance(raw, list) or len(raw) > MAX_LEASES:
        raise bad_request(f"body.leases must be a list of at most {MAX_LEASES} leases")
    leases = []
    for index, item in enumerate(raw):
        if not isinstance(item, dict):
            raise bad_request(f"body.leases[{index}] must be an object")
        g = Fields(item, f"body.leases[{index}]")
        leases.append((g.key("id"), g.integer("epoch")))
    stats = f.obj("stats", required=False)
    await as_worker(request, worker_id)
    store = store_of(request)
    lost, was_silent = await store.heartbeat(worker_id, leases, None if stats is None else dumps_read(stats))
    if was_silent:  # its long polls got nothing while it was silent: let them look again
        hub_of(request).notify(node_key(store.worker_node(worker_id)))
    return ok({"lost": lost})


# -- scoped memory ----------------------------------------------------------------------------


@router.get("/memory/{scope}/{key}", response_model=S.Memory)
async def get_memory(
    request: Request,
    scope: str,
    key: str,
    traverser_id: Annotated[str | None, Query(max_length=200, description="with epoch: a lease")] = None,
    epoch: Annotated[int | None, Query(ge=0, description="the task lease a worker reads under")] = None,
    worker_id: Annotated[str | None, Query(max_length=200, description="the worker holding it")] = None,
) -> Response:
    query = Fields({"traverser_id": traverser_id, "epoch": epoch, "worker_id": worker_id}, "query")
    await under_lease(request, query.lease(), read=True)
    return ok(store_of(request).get_memory(scope, key))


@router.put(
    "/memory/{scope}/{key}",
    response_model=S.MemorySaved,
    openapi_extra=_doc(
        {
            "value": B.PRESENT,
            "expected_revision": _INT,
            "traverser_id": _STR,
            "epoch": _INT,
            "worker_id": _STR,
        },
        ["value"],
        B.lease_rules("traverser_id"),
    ),
)
async def put_memory(request: Request, scope: str, key: str) -> Response:
    """Write scoped memory; with (traverser_id, epoch) the write also requires that live lease
    (a worker writes only under the lease of the task it holds; an owner, an administrator may
    write without one)."""
    f = Fields(await read_json(request))
    lease = await under_lease(request, f.lease())
    value = f.json("value")
    assert value is not None
    revision = await store_of(request).save_memory(
        scope, key, value, f.integer("expected_revision", required=False), lease
    )
    return ok({"scope": scope, "key": key, "revision": revision})


# -- server ----------------------------------------------------------------------------------


@router.get("/stats", response_model=S.Stats)
async def stats(request: Request) -> Response:
    """Requests answered since start (the benchmark divides them by cycles), store commits of write
    functions, and the statement groups and statements the writer sent (PostgreSQL's pipelined
    transitions: a group is one transaction, one round trip)."""
    counter = getattr(request.app.state, "counter", None)
    requests = 0 if counter is None else counter.requests
    db = store_of(request).db
    return ok({"requests": requests, "commits": db.commits, "groups": db.groups, "statements": db.statements})


__all__ = ["ApiError", "router"]
