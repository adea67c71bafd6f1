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

import orjson
from fastapi import FastAPI, Request
from starlette.types import ASGIApp, Receive, Scope, Send

from ._identity import Identity, Permission, Principal, Role

log = logging.getLogger("atfgraph.server")

__all__ = ["RULES", "AuthMiddleware", "Principal", "caller", "rule_for"]

R, S, D, W, A = Permission.READ, Permission.SUBMIT, Permission.DECIDE, Permission.WORK, Permission.ADMINISTER
_ID = "([^/]+)"


@dataclass(frozen=True, slots=True)
class Rule:
    method: str
    pattern: re.Pattern[str]
    allowed: frozenset[Permission]
    action: str


def _rule(method: str, path: str, action: str, *allowed: Permission) -> Rule:
    return Rule(method, re.compile("/api/v2" + path.replace("{id}", _ID)), frozenset(allowed), action)


#: Who may call what. Workers act only through the worker protocol (claims, leases, checkpoints
#: and approvals of the tasks they hold, child traversers); they cannot decide or browse.
RULES: tuple[Rule, ...] = (
    _rule("POST", "/traversers", "traverser.submit", S, W),  # W: a handler's cross-node child step
    _rule("GET", "/traversers", "traverser.list", R),
    _rule("GET", "/traversers/{id}", "traverser.get", R, W),  # W: following that child step
    _rule("GET", "/traversers/{id}/path", "traverser.path", R),
    _rule("POST", "/traversers/{id}/cancel", "traverser.cancel", S),
    _rule("POST", "/traversers/{id}/complete", "task.complete", W),
    _rule("POST", "/traversers/{id}/fail", "task.fail", W),
    _rule("POST", "/traversers/{id}/release", "task.release", W),
    _rule("GET", "/traversers/{id}/checkpoints/{id}", "checkpoint.get", R, W),
    _rule("PUT", "/traversers/{id}/checkpoints/{id}", "checkpoint.put", W),
    _rule("POST", "/approvals", "approval.request", W, S),  # S: Client.request_approval(pause=False)
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
    _rule("GET", "/memory/{id}/{id}", "memory.get", R, W),
    _rule("PUT", "/memory/{id}/{id}", "memory.put", W, S),
    _rule("GET", "/hooks", "hook.list", R),
    _rule("POST", "/hooks/{id}/resume", "hook.resume", D),
    _rule("GET", "/tokens", "token.list", A),
    _rule("POST", "/tokens", "token.create", A),
    _rule("POST", "/tokens/{id}/revoke", "token.revoke", A),
    _rule("GET", "/audit", "audit.list", A),
    _rule("GET", "/notifications", "notification.list", A),
    _rule("GET", "/runs", "run.list", R),
    _rule("GET", "/runs/{id}", "run.get", R),
    _rule("GET", "/inbox", "inbox.list", R),
    _rule("GET", "/stats", "server.stats", R),
)

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
        if scope["type"] != "http" or not path.startswith("/api/") or PUBLIC.fullmatch(path):
            await self.app(scope, receive, send)
            return
        identity: Identity = self.fastapi_app.state.identity
        principal = identity.verify(_bearer(scope))
        rule, target = _match(scope["method"], path)
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
        scope.setdefault("state", {})["principal"] = principal
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
