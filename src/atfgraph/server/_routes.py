"""HTTP API v2. Bodies are read by hand (see ``_body``) so size, depth and type errors share one
JSON shape; responses embed stored JSON bytes as they are (orjson fragments)."""

from __future__ import annotations

import time
from typing import Annotated, Any

import orjson
from fastapi import APIRouter, Depends, Query, Request, Response

from .._json import dumps_read
from .._models import DECISIONS, ApprovalStatus, TraverserStatus
from ._assign import parse_assignees, parse_escalation, read_assignment
from ._auth import Principal, caller
from ._body import Fields, error_info, read_json
from ._errors import RETRY_AFTER_SECONDS, ApiError, bad_request
from ._hub import Hub, node_key, traverser_key
from ._service import Service
from ._store import GraphStore

router = APIRouter(prefix="/api/v2")

_MAX_CLAIM_WAIT = 30.0
MAX_CLIENT_WAIT = 60.0
_WAIT_FOR_DOC = "statuses to wait for, comma-separated, or 'terminal'"


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


def _doc(properties: dict[str, Any], required: list[str]) -> dict[str, Any]:
    """An OpenAPI request body for a hand-read JSON object."""
    schema = {"type": "object", "properties": properties, "required": required}
    return {"requestBody": {"required": True, "content": {"application/json": {"schema": schema}}}}


_ANY: dict[str, Any] = {}
_STR = {"type": "string"}
_INT = {"type": "integer"}
_STEPS = {"type": "array", "items": {"type": "object"}}


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
    openapi_extra=_doc(
        {
            "target": _STR,
            "input": {"type": "object"},
            "max_attempts": _INT,
            "wait_for": _STR,
            "wait_seconds": {"type": "number"},
            "idempotency_key": _STR,
        },
        ["target"],
    ),
)
async def submit(request: Request, who: Annotated[Principal, Depends(caller)]) -> Response:
    """Submit a traverser: run skill ``node.skill`` with ``input`` as keyword arguments. With
    ``wait_for`` and ``wait_seconds`` the answer comes once it reaches one of those statuses
    (as ``GET /traversers/{id}?wait_for=`` would), or after that many seconds. A repeated
    ``idempotency_key`` answers 200 with the traverser it created first."""
    f = Fields(await read_json(request))
    target = f.key("target")
    node, dot, skill = target.partition(".")
    if not dot or not node or not skill:
        raise bad_request("body.target must look like 'node.skill'")
    inputs = f.obj("input", required=False)
    input_json = b"{}" if inputs is None else dumps_read(inputs)
    max_attempts = f.integer("max_attempts", required=False, minimum=1, maximum=1000) or 3
    wanted = _parse_statuses(f.key("wait_for", required=False))
    wait = f.number("wait_seconds", required=False, maximum=MAX_CLIENT_WAIT) or 0.0
    key = f.key("idempotency_key", required=False)
    view, created = await service_of(request).submit(who, target, input_json, max_attempts, key)
    code = 201 if created else 200
    if not wanted or wait <= 0:
        return ok(view, code)
    # Submit-and-follow: one round trip instead of two for callers that wait anyway.
    return await _follow(request, view["id"], wanted, wait, code)


@router.get("/traversers")
async def list_traversers(
    request: Request,
    status: Annotated[TraverserStatus, Query()] = TraverserStatus.WAITING,
    limit: Annotated[int, Query(ge=1, le=1000)] = 100,
) -> Response:
    """Traversers in one status, newest first (``atfg ps`` shows ``waiting`` ones)."""
    return ok({"items": store_of(request).list_traversers(status.value, limit)})


@router.get("/traversers/{traverser_id}")
async def get_traverser(
    request: Request,
    traverser_id: str,
    wait_for: Annotated[str | None, Query(max_length=200, description=_WAIT_FOR_DOC)] = None,
    timeout: Annotated[float, Query(ge=0.0, le=MAX_CLIENT_WAIT)] = 0.0,
) -> Response:
    """One traverser. With ``wait_for``, a long poll: answers as soon as the status is one of
    those listed (``terminal`` = succeeded, failed or cancelled) or after ``timeout`` seconds."""
    return await _follow(request, traverser_id, _parse_statuses(wait_for), timeout, 200)


async def _follow(
    request: Request, traverser_id: str, wanted: set[str], timeout: float, code: int
) -> Response:
    """Answer with the traverser once its status is in ``wanted`` (at once if empty), or at the
    deadline with whatever it is then."""
    store, hub = store_of(request), hub_of(request)
    deadline = time.monotonic() + timeout
    while True:
        fut = hub.subscribe(traverser_key(traverser_id))
        try:
            view = await store.read_traverser(traverser_id)
            remaining = deadline - time.monotonic()
            if not wanted or view["status"] in wanted or remaining <= 0 or hub.closing:
                return ok(view, code)
            if not await hub.wait(fut, remaining):
                return ok(await store.read_traverser(traverser_id), code)
        finally:
            hub.unsubscribe(traverser_key(traverser_id), fut)


def _parse_statuses(raw: str | None) -> set[str]:
    if not raw:
        return set()
    wanted: set[str] = set()
    for part in raw.split(","):
        part = part.strip()
        if part == "terminal":
            wanted |= {s.value for s in TraverserStatus if s.is_terminal}
        elif part in TraverserStatus.__members__.values():
            wanted.add(part)
        else:
            raise bad_request(f"wait_for: unknown status {part!r}")
    return wanted


@router.get("/traversers/{traverser_id}/path")
async def get_path(request: Request, traverser_id: str) -> Response:
    """The traverser and its child steps, in order."""
    return ok(store_of(request).path(traverser_id))


@router.post("/traversers/{traverser_id}/cancel")
async def cancel(request: Request, traverser_id: str, who: Annotated[Principal, Depends(caller)]) -> Response:
    return ok(await service_of(request).cancel(who, traverser_id))


_LEASED = {"epoch": _INT, "steps": _STEPS}


@router.post(
    "/traversers/{traverser_id}/complete",
    openapi_extra=_doc({**_LEASED, "result": _ANY}, ["epoch"]),
)
async def complete(request: Request, traverser_id: str) -> Response:
    """A worker reports the handler's result (under its lease)."""
    f = Fields(await read_json(request))
    result = f.json("result", required=False) or b"null"
    await store_of(request).complete(traverser_id, f.integer("epoch"), result, f.steps())
    hub_of(request).notify(traverser_key(traverser_id))
    return ok({"status": TraverserStatus.SUCCEEDED.value})


@router.post(
    "/traversers/{traverser_id}/fail",
    openapi_extra=_doc(
        {**_LEASED, "error": {"type": "object"}, "retryable": {"type": "boolean"}}, ["epoch", "error"]
    ),
)
async def fail(request: Request, traverser_id: str) -> Response:
    """A worker reports the handler's error; retried while attempts remain if ``retryable``."""
    f = Fields(await read_json(request))
    error = dumps_read(error_info(Fields(f.obj("error"), "body.error")))
    store = store_of(request)
    status = await store.fail(
        traverser_id, f.integer("epoch"), error, f.boolean("retryable", False), f.steps()
    )
    _after_change(request, traverser_id, status)
    return ok({"status": status})


@router.post("/traversers/{traverser_id}/release", openapi_extra=_doc(_LEASED, ["epoch"]))
async def release(request: Request, traverser_id: str) -> Response:
    """A stopping worker gives a lease back; the attempt is not charged."""
    f = Fields(await read_json(request))
    await store_of(request).release(traverser_id, f.integer("epoch"), f.steps())
    _after_change(request, traverser_id, TraverserStatus.QUEUED.value)
    return ok({"status": TraverserStatus.QUEUED.value})


def _after_change(request: Request, traverser_id: str, status: str) -> None:
    hub = hub_of(request)
    hub.notify(traverser_key(traverser_id))
    if status == TraverserStatus.QUEUED:
        node = store_of(request).get_traverser(traverser_id)["node_id"]
        hub.notify(node_key(node))


@router.get("/traversers/{traverser_id}/checkpoints/{name}")
async def get_checkpoint(request: Request, traverser_id: str, name: str) -> Response:
    return ok(store_of(request).get_checkpoint(traverser_id, name))


@router.put(
    "/traversers/{traverser_id}/checkpoints/{name}",
    openapi_extra=_doc({**_LEASED, "value": _ANY, "expected_revision": _INT}, ["epoch", "value"]),
)
async def put_checkpoint(request: Request, traverser_id: str, name: str) -> Response:
    """Save a checkpoint under the task lease; ``expected_revision`` 0 creates only if absent."""
    f = Fields(await read_json(request))
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
    openapi_extra=_doc(
        {
            **_LEASED,
            "traverser_id": _STR,
            "operation_key": _STR,
            "prompt": _ANY,
            "checkpoint": _ANY,
            "expires_in_seconds": {"type": "number"},
            "pause": {"type": "boolean"},
            "assign_to": {"type": "object"},
            "escalate": {"type": "object"},
        },
        ["traverser_id", "operation_key", "prompt"],
    ),
)
async def request_approval(request: Request, who: Annotated[Principal, Depends(caller)]) -> Response:
    """Find or create the approval (traverser_id, operation_key). With ``pause`` (the default,
    which needs the task lease) a pending approval also closes the lease and parks the traverser."""
    f = Fields(await read_json(request))
    traverser_id = f.key("traverser_id")
    prompt = f.json("prompt")
    assert prompt is not None
    approval, paused = await service_of(request).request_approval(
        who,
        traverser_id,
        f.integer("epoch", required=False),
        f.key("operation_key"),
        prompt,
        f.json("checkpoint", required=False),
        f.number("expires_in_seconds", required=False, maximum=10 * 365 * 86400),
        f.boolean("pause", True),
        f.steps(),
        parse_assignees(f.data.get("assign_to"), "body.assign_to"),
        parse_escalation(f.data.get("escalate")),
    )
    return ok({"approval": approval, "paused": paused})


@router.get("/approvals")
async def list_approvals(
    request: Request,
    status: Annotated[str, Query(description="pending, approved, rejected, expired or all")] = "pending",
    traverser_id: Annotated[str | None, Query(max_length=200)] = None,
    limit: Annotated[int, Query(ge=1, le=1000)] = 100,
) -> Response:
    """The approval inbox: pending approvals, oldest first, unless ``status`` says otherwise."""
    if status != "all" and status not in ApprovalStatus.__members__.values():
        raise bad_request(f"status must be one of pending, approved, rejected, expired, all; not {status!r}")
    items = store_of(request).list_approvals(None if status == "all" else status, traverser_id, limit)
    return ok({"items": items})


@router.get("/approvals/{approval_id}")
async def get_approval(request: Request, approval_id: str) -> Response:
    """One approval, with ``assignment`` (who may decide it, and its escalation) when it has one."""
    store = store_of(request)
    approval = store.get_approval(approval_id)
    assignment = store.db.read(lambda conn: read_assignment(conn, approval_id))
    return ok(approval if assignment is None else {**approval, "assignment": assignment})


@router.post(
    "/approvals/{approval_id}/decide",
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
    openapi_extra=_doc(
        {"node_id": _STR, "version": _STR, "capacity": _INT}, ["node_id", "version", "capacity"]
    ),
)
async def register_worker(request: Request) -> Response:
    f = Fields(await read_json(request))
    node = f.key("node_id")
    if "." in node:
        raise bad_request("body.node_id must not contain '.'")
    store = store_of(request)
    view = await store.register_worker(node, f.key("version"), f.integer("capacity", minimum=1))
    # The worker paces its heartbeats from this (a third of a lease) before its first claim.
    return ok({**view, "lease_seconds": store.lease_seconds}, 201)


@router.get("/workers")
async def list_workers(request: Request, limit: Annotated[int, Query(ge=1, le=1000)] = 100) -> Response:
    return ok({"items": store_of(request).list_workers(limit)})


@router.get("/workers/{worker_id}")
async def get_worker(request: Request, worker_id: str) -> Response:
    return ok(store_of(request).get_worker(worker_id))


@router.post(
    "/workers/{worker_id}/claim",
    openapi_extra=_doc({"max": _INT, "wait_seconds": {"type": "number"}}, ["max"]),
)
async def claim(request: Request, worker_id: str) -> Response:
    """Lease up to ``max`` tasks for this worker's (node, version); a long poll of up to
    ``wait_seconds`` that answers the moment work is queued for the node."""
    f = Fields(await read_json(request))
    limit = f.integer("max", minimum=1, maximum=100)
    wait = f.number("wait_seconds", required=False, maximum=_MAX_CLAIM_WAIT) or 0.0
    store, hub = store_of(request), hub_of(request)
    node = store.worker_node(worker_id)
    deadline = time.monotonic() + wait
    while True:
        fut = hub.subscribe(node_key(node))
        try:
            # A worker that went away mid-poll must not be handed leases it will never run.
            if await request.is_disconnected():
                tasks = []
                break
            tasks = await store.claim(worker_id, limit)
            remaining = deadline - time.monotonic()
            if tasks or remaining <= 0 or hub.closing:
                break
            await hub.wait(fut, min(remaining, 5.0))
        finally:
            hub.unsubscribe(node_key(node), fut)
    for task in tasks:
        hub.notify(traverser_key(task["traverser"]["id"]))
    return ok({"tasks": tasks, "lease_seconds": store.lease_seconds})


@router.post("/workers/{worker_id}/release")
async def release_worker(request: Request, worker_id: str) -> Response:
    """A stopping worker gives back whatever it still holds (attempts not charged)."""
    store = store_of(request)
    store.get_worker(worker_id)  # 404 for an unknown worker
    nodes = await store.release_all(worker_id)
    for node in nodes:
        hub_of(request).notify(node_key(node))
    return ok({"released_nodes": nodes})


@router.post(
    "/workers/{worker_id}/heartbeat",
    openapi_extra=_doc({"leases": {"type": "array"}, "stats": {"type": "object"}}, []),
)
async def heartbeat(request: Request, worker_id: str) -> Response:
    """Extend the worker's leases and record its counters; answers the leases it lost."""
    f = Fields(await read_json(request))
    raw = f.data.get("leases")
    raw = [] if raw is None else raw
    if not isinstance(raw, list) or len(raw) > 10_000:
        raise bad_request("body.leases must be a list")
    leases = []
    for index, item in enumerate(raw):
        if not isinstance(item, dict):
            raise bad_request(f"body.leases[{index}] must be an object")
        g = Fields(item, f"body.leases[{index}]")
        leases.append((g.key("id"), g.integer("epoch")))
    stats = f.obj("stats", required=False)
    lost = await store_of(request).heartbeat(worker_id, leases, None if stats is None else dumps_read(stats))
    return ok({"lost": lost})


# -- scoped memory ----------------------------------------------------------------------------


@router.get("/memory/{scope}/{key}")
async def get_memory(request: Request, scope: str, key: str) -> Response:
    return ok(store_of(request).get_memory(scope, key))


@router.put(
    "/memory/{scope}/{key}",
    openapi_extra=_doc(
        {"value": _ANY, "expected_revision": _INT, "traverser_id": _STR, "epoch": _INT}, ["value"]
    ),
)
async def put_memory(request: Request, scope: str, key: str) -> Response:
    """Write scoped memory; with (traverser_id, epoch) the write also requires that live lease."""
    f = Fields(await read_json(request))
    value = f.json("value")
    assert value is not None
    traverser_id, epoch = f.key("traverser_id", required=False), f.integer("epoch", required=False)
    if (traverser_id is None) != (epoch is None):
        raise bad_request("body.traverser_id and body.epoch go together")
    lease = None if traverser_id is None else (traverser_id, epoch)
    revision = await store_of(request).save_memory(
        scope, key, value, f.integer("expected_revision", required=False), lease
    )
    return ok({"scope": scope, "key": key, "revision": revision})


# -- server ----------------------------------------------------------------------------------


@router.get("/stats")
async def stats(request: Request) -> Response:
    """Request counts since start (the benchmark divides them by cycles), store commits of write
    functions, and the statement groups and statements the writer sent (PostgreSQL's pipelined
    transitions: a group is one transaction, one round trip)."""
    counter = getattr(request.app.state, "counter", None)
    requests = 0 if counter is None else counter.requests
    db = store_of(request).db
    return ok({"requests": requests, "commits": db.commits, "groups": db.groups, "statements": db.statements})


__all__ = ["ApiError", "router"]
