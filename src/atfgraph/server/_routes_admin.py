"""HTTP API v2: tokens, the audit trail, and pyworkflow hooks in the server's database (the
inbox shows them beside approvals). Permissions are enforced by ``_auth.RULES``."""

from __future__ import annotations

from typing import Annotated, Any, Literal, get_args

from fastapi import APIRouter, Depends, Query, Request, Response

from . import _schemas as S
from ._auth import Principal, caller
from ._body import NAME_PATTERN, Fields, read_json
from ._body_schema import JSON, text
from ._errors import ApiError, bad_request
from ._identity import MAX_NAME, AuditEntry, Identity, IdentityError, Role
from ._notify import DELIVERY_STATUSES, Notifier
from ._paging import After, Limit, decode, page
from ._refusals import NotFound
from ._routes import _doc, ok, service_of, store_of

router = APIRouter(prefix="/api/v2")

#: The deliveries' status filter, declared as an enum.
DeliveryFilter = Literal["dead", "pending", "delivered"]
assert set(get_args(DeliveryFilter)) == set(DELIVERY_STATUSES)


def identity_of(request: Request) -> Identity:
    identity: Identity = request.app.state.identity
    return identity


# -- tokens -----------------------------------------------------------------------------------


@router.post(
    "/tokens",
    status_code=201,
    response_model=S.TokenCreated,
    openapi_extra=_doc(
        {"name": {**text(MAX_NAME, 1), "pattern": NAME_PATTERN}, "role": {"enum": [r.value for r in Role]}},
        ["name", "role"],
    ),
)
async def create_token(request: Request, who: Annotated[Principal, Depends(caller)]) -> Response:
    """Mint a bearer token; the raw token is in this answer only (store it now)."""
    f = Fields(await read_json(request))
    name, role = f.key("name"), f.key("role")
    identity = identity_of(request)
    try:
        audit = AuditEntry(who, "token.create", None, "allowed", {"name": name, "role": role})
        info, raw = await identity.create_token(name, role, created_by=who, audit=audit)
    except IdentityError as exc:
        raise bad_request(str(exc)) from None
    except PermissionError as exc:
        await identity.audit(who, "token.create", target=None, outcome="denied", detail={"role": role})
        raise ApiError(403, "forbidden", str(exc)) from None
    return ok({"token": raw, "info": info.as_json()}, 201)


@router.get("/tokens", response_model=S.TokenList)
async def list_tokens(request: Request, limit: Limit = 100, after: After = None) -> Response:
    """Every token (never its secret), oldest first, a page at a time."""
    start = decode("tokens", after)
    tokens = sorted(await identity_of(request).list_tokens(), key=lambda t: (t.created_at, t.id))
    if start is not None:
        tokens = [t for t in tokens if (t.created_at, t.id) > start]
    return ok(page("tokens", [t.as_json() for t in tokens[: limit + 1]], limit))


@router.post("/tokens/{token_id}/revoke", response_model=S.TokenRevoked)
async def revoke_token(
    request: Request, token_id: str, who: Annotated[Principal, Depends(caller)]
) -> Response:
    identity = identity_of(request)
    try:
        revoked = await identity.revoke(token_id, AuditEntry(who, "token.revoke", token_id, "allowed"))
    except IdentityError:
        raise NotFound.of("token", token_id) from None
    info = next(t for t in await identity.list_tokens() if t.id == token_id)
    return ok({"revoked": revoked, "info": info.as_json()})


@router.get("/audit", response_model=S.AuditList)
async def list_audit(
    request: Request,
    target: Annotated[str | None, Query(max_length=500)] = None,
    action: Annotated[str | None, Query(max_length=100, description="e.g. approval.decide")] = None,
    outcome: Annotated[Literal["allowed", "denied"] | None, Query()] = None,
    since: Annotated[float | None, Query(ge=0, description="at or after (Unix seconds)")] = None,
    until: Annotated[float | None, Query(ge=0, description="before (Unix seconds)")] = None,
    limit: Limit = 100,
    after: After = None,
) -> Response:
    """Decisions, token changes and denied attempts, newest first, a page at a time."""
    start = decode("audit", after, arity=1)
    items = await identity_of(request).list_audit(
        target=target,
        action=action,
        outcome=outcome,
        since=since,
        until=until,
        limit=limit + 1,
        after_id=None if start is None else int(start[0]),
    )
    return ok(page("audit", items, limit, ("id",)))


# -- notifications ------------------------------------------------------------------------------


@router.get("/notifications", response_model=S.DeliveryList)
async def list_notifications(
    request: Request,
    status: Annotated[
        DeliveryFilter, Query(description="dead (the dead-letter list), pending or delivered")
    ] = "dead",
    limit: Limit = 100,
    after: After = None,
) -> Response:
    """Deliveries of created-wait events to the configured endpoints, newest first: each with its
    attempts, next attempt and last error. ``dead`` ones exhausted their attempts."""
    notifier: Notifier = request.app.state.notifier
    return ok(page("notifications", notifier.list(status, limit + 1, decode("notifications", after)), limit))


# -- pyworkflow hooks -------------------------------------------------------------------------


def _hook_view(item: dict[str, Any]) -> dict[str, Any]:
    """A hook as GET /hooks shows it, from its inbox item."""
    return {
        "id": item["id"],
        "run_id": item["run"]["id"],
        "kind": item["kind"],
        "name": item["name"],
        "step_key": item["step_key"],
        "created_at": item["created_at"],
        "created_at_iso": item["created_at_iso"],
        "expires_at": item["expires_at"],
        "expires_at_iso": item["expires_at_iso"],
    }


@router.get("/hooks", response_model=S.HookList)
async def list_hooks(request: Request, limit: Limit = 100, after: After = None) -> Response:
    """Pending pyworkflow hooks and step hooks in this server's database, oldest first, a page at
    a time (the inbox's read, narrowed to hooks)."""
    items = store_of(request).inbox(limit + 1, after=decode("hooks", after), hooks_only=True)
    return ok(page("hooks", [_hook_view(item) for item in items], limit))


_PAYLOAD = {
    **JSON,
    "description": "any JSON value the hook's payload_schema accepts (as the body: 1 MiB, 64 levels)",
}


@router.post(
    "/hooks/{hook_id}/resume", response_model=S.HookResumed, openapi_extra=_doc({"payload": _PAYLOAD}, [])
)
async def resume_hook(request: Request, hook_id: str, who: Annotated[Principal, Depends(caller)]) -> Response:
    """Deliver ``payload`` to a pending hook (an operator's answer, authorized by role instead of
    the hook's token). The run continues on whatever pyworkflow runtime serves this database."""
    f = Fields(await read_json(request))
    resolved = await service_of(request).resume_hook(who, hook_id, f.data.get("payload"))
    return ok(
        {
            "run_id": resolved.run_id,
            "hook_id": resolved.id,
            "hook_name": resolved.name,
            "status": resolved.status.value,
        }
    )
