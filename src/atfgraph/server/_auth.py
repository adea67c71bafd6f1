"""Authentication and authorization of the HTTP API, in one place.

Every ``/api/v2`` request must carry ``Authorization: Bearer <token>``. The permission each route
needs is declared in :data:`RULES` (method, path pattern, the permissions any one of which is
enough); a request without a live token is ``401 unauthenticated``, one whose role lacks the
permission is ``403 forbidden``, and both are audited (those without a token within the bounds
of ``Identity.anonymous``). The check runs as ASGI middleware in front of both the FastAPI
router and the fast path, so no route can be reached without it.
"""

from __future__ import annotations

import logging
import re
from dataclasses import dataclass
from typing import TYPE_CHECKING

import orjson
from fastapi import FastAPI, Request
from starlette.types import ASGIApp, Receive, Scope, Send

from ._errors import ApiError
from ._graph_rows import Lease
from ._identity import Identity, Permission, Principal, Role
from ._refusals import Forbidden

if TYPE_CHECKING:
    from ._store import GraphStore

log = logging.getLogger("atfgraph.server")

__all__ = ["RULES", "AuthMiddleware", "Lease", "Principal", "as_worker", "caller", "rule_for", "under_lease"]

R, S, D, W, A = Permission.READ, Permission.SUBMIT, Permission.DECIDE, Permission.WORK, Permission.ADMINISTER
_ID = "([^/]+)"


@dataclass(frozen=True, slots=True)
class Rule:
    method: str
    pattern: re.Pattern[str]
    allowed: frozenset[Permission]
    action: str
    #: the path with ``{id}`` for each id: the route label of the HTTP metrics
    template: str
    #: the permissions of ``allowed`` that allow the route only under a task lease the request
    #: carries (see :func:`under_lease`)
    leased: frozenset[Permission] = frozenset()


def _rule(
    method: str,
    path: str,
    action: str,
    *allowed: Permission,
    leased: tuple[Permission, ...] = (),
    prefix: str = "/api/v2",
) -> Rule:
    pattern = re.compile(prefix + path.replace("{id}", _ID))
    return Rule(
        method, pattern, frozenset(allowed) | frozenset(leased), action, prefix + path, frozenset(leased)
    )


#: Who may call what. Workers act only through the worker protocol, and every call of it that
#: names a run is marked ``leased=(W,)``: a worker may make it only under the task lease it
#: holds on that run (see :func:`under_lease`): the outcome, checkpoints, approvals, memory and
#: child steps of the task it holds. Workers cannot decide, browse, or read a traverser. Owners
#: and administrators keep every route (A on the worker's own: they may stand in for a worker).
RULES: tuple[Rule, ...] = (
    _rule("POST", "/traversers", "traverser.submit", S, leased=(W,)),  # W: a child step of its task
    _rule("GET", "/traversers", "traverser.list", R),
    _rule("GET", "/traversers/{id}", "traverser.get", R),
    _rule("GET", "/traversers/{id}/path", "traverser.path", R),
    _rule("POST", "/traversers/{id}/cancel", "traverser.cancel", S),
    _rule("POST", "/traversers/{id}/complete", "task.complete", A, leased=(W,)),
    _rule("POST", "/traversers/{id}/fail", "task.fail", A, leased=(W,)),
    _rule("POST", "/traversers/{id}/release", "task.release", A, leased=(W,)),
    _rule("GET", "/traversers/{id}/checkpoints/{id}", "checkpoint.get", R, leased=(W,)),
    _rule("PUT", "/traversers/{id}/checkpoints/{id}", "checkpoint.put", A, leased=(W,)),
    _rule("POST", "/approvals", "approval.request", S, leased=(W,)),  # S: Client.request_approval
    _rule("GET", "/approvals", "approval.list", R),
    _rule("GET", "/approvals/{id}", "approval.get", R),
    _rule("POST", "/approvals/{id}/decide", "approval.decide", D),
    _rule("POST", "/approvals/{id}/links", "approval.link.create", D),
    _rule("GET", "/approvals/{id}/links", "approval.link.list", R),
    _rule("POST", "/links/{id}/revoke", "approval.link.revoke", D),
    _rule("POST", "/waits/{id}/webhooks", "wait.webhook.create", D),
    _rule("GET", "/waits/{id}/webhooks", "wait.webhook.list", R),
    _rule("POST", "/workers", "worker.register", W),
    _rule("GET", "/workers", "worker.list", R),
    _rule("GET", "/workers/{id}", "worker.get", R, W),
    _rule("POST", "/workers/{id}/claim", "worker.claim", W),
    _rule("POST", "/workers/{id}/heartbeat", "worker.heartbeat", W),
    _rule("POST", "/workers/{id}/release", "worker.release", W),
    _rule("GET", "/memory/{id}/{id}", "memory.get", R, leased=(W,)),
    _rule("PUT", "/memory/{id}/{id}", "memory.put", S, leased=(W,)),
    _rule("GET", "/hooks", "hook.list", R),
    _rule("POST", "/hooks/{id}/resume", "hook.resume", D),
    _rule("GET", "/tokens", "token.list", A),
    _rule("POST", "/tokens", "token.create", A),
    _rule("POST", "/tokens/{id}/revoke", "token.revoke", A),
    _rule("GET", "/audit", "audit.list", A),
    _rule("GET", "/notifications", "notification.list", A),
    _rule("GET", "/runs", "run.list", R),
    _rule("POST", "/runs", "run.start", S),
    _rule("GET", "/runs/{id}", "run.get", R),
    _rule("POST", "/runs/{id}/retry", "run.retry", S),
    _rule("POST", "/runs/{id}/cancel", "run.cancel", S),
    _rule("GET", "/ids", "run.get", R),  # finding a run (or an approval) by its id's start
    _rule("GET", "/inbox", "inbox.list", R),
    _rule("GET", "/stats", "server.stats", R),
    # The server's metrics: owners and administrators (or a separate --metrics-bind address).
    _rule("GET", "/metrics", "server.metrics", A, prefix=""),
)

#: Paths outside /api/ that need a token all the same.
_PROTECTED = frozenset({"/metrics"})

#: Reachable without a token: the API description, so that tools can discover it, and the signed
#: webhook deliveries, which their signature authenticates (``_routes_links``).
PUBLIC = re.compile("/api/v2/(openapi\\.json|docs.*|webhooks/[^/]+)")


def rule_for(method: str, path: str) -> Rule | None:
    return _match(method, path)[0]


def _match(method: str, path: str) -> tuple[Rule | None, str]:
    """The rule for a request and the audit target: the first id in the path (an approval's,
    a traverser's, a token's), else the path itself. ``path`` is the ASGI path, which the server
    has already percent-decoded: the id is taken as it is, the same id the route sees (decoding
    it again would turn ``%2500`` into a NUL)."""
    for rule in RULES:
        if rule.method == method and (match := rule.pattern.fullmatch(path)) is not None:
            return rule, match.group(1) if match.groups() else path
    return None, path


def _bearer(scope: Scope) -> str | None:
    for name, value in scope.get("headers", ()):
        if name == b"authorization":
            scheme, _, token = value.decode("latin-1").partition(" ")
            return token.strip() if scheme.lower() == "bearer" else None
    return None


class AuthMiddleware:
    """ASGI: authenticate and authorize ``/api/v2`` before anything else sees the request."""

    def __init__(self, app: ASGIApp, fastapi_app: FastAPI) -> None:
        self.app = app
        self.fastapi_app = fastapi_app

    async def __call__(self, scope: Scope, receive: Receive, send: Send) -> None:
        path = scope.get("path", "")
        if scope["type"] != "http" or PUBLIC.fullmatch(path):
            await self.app(scope, receive, send)
            return
        if not path.startswith("/api/") and path not in _PROTECTED:
            await self.app(scope, receive, send)
            return
        identity: Identity = self.fastapi_app.state.identity
        principal = identity.verify(_bearer(scope))
        rule, target = _match(scope["method"], path)
        if rule is not None:
            scope["route_template"] = rule.template
        if principal is None:
            if rule is not None and rule.allowed & {D, A}:
                client = scope.get("client")
                await identity.audit(
                    None,
                    rule.action,
                    target=path,
                    outcome="denied",
                    detail="no valid token",
                    client=client[0] if client else None,
                )
            await _deny(
                send, 401, "unauthenticated", "a valid bearer token is required (Authorization: Bearer ...)"
            )
            return
        if rule is not None and not any(principal.can(p) for p in rule.allowed):
            await identity.audit(principal, rule.action, target=target, outcome="denied", detail="forbidden")
            need = " or ".join(sorted(p.value for p in rule.allowed))
            await _deny(
                send, 403, "forbidden", f"role {principal.role.value!r} may not {rule.action} (needs {need})"
            )
            return
        state = scope.setdefault("state", {})
        state["principal"] = principal
        if rule is not None and rule.leased and not any(principal.can(p) for p in rule.allowed - rule.leased):
            state["leased_rule"] = (rule, target)  # under_lease: this caller needs a task lease
        await identity.touch(principal)
        await self.app(scope, receive, send)


async def _deny(send: Send, status: int, code: str, message: str) -> None:
    body = orjson.dumps({"error": {"code": code, "message": message}})
    headers = [(b"content-type", b"application/json"), (b"content-length", str(len(body)).encode())]
    if status == 401:
        headers.append((b"www-authenticate", b'Bearer realm="atfgraph"'))
    await send({"type": "http.response.start", "status": status, "headers": headers})
    await send({"type": "http.response.body", "body": body})


async def caller(request: Request) -> Principal:
    """The authenticated principal of this request (set by :class:`AuthMiddleware`)."""
    principal = request.scope.get("state", {}).get("principal")
    if not isinstance(principal, Principal):  # only reachable if the middleware is not installed
        raise RuntimeError("AuthMiddleware is not installed in front of the API")
    return principal


def is_worker_only(principal: Principal) -> bool:
    return principal.role is Role.WORKER


async def under_lease(request: Request, lease: Lease | None, *, read: bool = False) -> Lease | None:
    """The task lease this request acts under, as its route read it (None: it names none).

    The worker-scope rule, for every route whose rule is ``leased``: a caller whose role allows
    the route only under a lease (a worker) must name the lease it holds on the run the request
    is about: the traverser, the lease's epoch and its own worker id, else ``403 forbidden``.
    The lease must be live (``409 lease_lost``, the protocol's answer to a worker whose lease
    ran out or was taken over) and held by that worker (``403 forbidden``). Its write then runs
    under the same epoch, checked again in its transaction by the store, so nothing changes
    unless the lease is still live at commit. A caller with another permission for the route (an
    owner, an administrator) may name a lease or not; a lease it names is checked by the write
    (and here, for a ``read``, or when it names a worker). Denials are audited."""
    leased = request.scope.get("state", {}).get("leased_rule")
    if leased is not None and (lease is None or lease.worker_id is None):
        await _deny_lease(request, leased, "no task lease")
        principal = await caller(request)
        raise ApiError(
            403,
            "forbidden",
            f"role {principal.role.value!r} may {leased[0].action} only under the task lease it holds "
            "(send the traverser's id, the lease's epoch and your worker_id)",
        )
    if lease is not None and lease.worker_id is not None:
        await as_worker(request, lease.worker_id)
    if lease is not None and (read or lease.worker_id is not None):
        store: GraphStore = request.app.state.store
        try:
            await store.check_lease(lease, live=read)
        except Forbidden:
            if leased is not None:
                await _deny_lease(request, leased, "lease held by another worker")
            raise
    return lease


async def as_worker(request: Request, worker_id: str) -> None:
    """The worker-identity rule: a worker credential acts only as the workers registered with
    it (claims, heartbeats, releases, and leases naming a worker id), else ``403 forbidden``,
    audited; ``404`` for an unknown worker. Owners and administrators may act as any worker. A
    worker registered before tokens were recorded (no token) is not checked."""
    store: GraphStore = request.app.state.store
    token = store.worker_token(worker_id)  # 404 for an unknown worker, whoever asks
    principal = await caller(request)
    if is_worker_only(principal) and token is not None and token != principal.id:
        identity: Identity = request.app.state.identity
        await identity.audit(
            principal, "worker.act", target=worker_id[:200], outcome="denied", detail="another token's worker"
        )
        raise ApiError(403, "forbidden", f"worker {worker_id!r} was registered with another credential")


async def _deny_lease(request: Request, leased: tuple[Rule, str], detail: str) -> None:
    identity: Identity = request.app.state.identity
    rule, target = leased
    await identity.audit(await caller(request), rule.action, target=target, outcome="denied", detail=detail)
