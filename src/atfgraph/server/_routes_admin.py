"""HTTP API v2: tokens, the audit trail, and pyworkflow hooks in the server's database (the
inbox shows them beside approvals). Permissions are enforced by ``_auth.RULES``."""

from __future__ import annotations

import time
from typing import Annotated, Any

from fastapi import APIRouter, Depends, Query, Request, Response

import pyworkflow
from pyworkflow import validate_payload
from pyworkflow.store import WaitKind, WaitStatus

from ._auth import Principal, caller
from ._body import Fields, read_json
from ._errors import ApiError, bad_request, not_found
from ._identity import Identity, IdentityError
from ._routes import _doc, ok, store_of

router = APIRouter(prefix="/api/v2")

_STR = {"type": "string"}


def identity_of(request: Request) -> Identity:
    identity: Identity = request.app.state.identity
    return identity


# -- tokens -----------------------------------------------------------------------------------


@router.post("/tokens", status_code=201, openapi_extra=_doc({"name": _STR, "role": _STR}, ["name", "role"]))
async def create_token(request: Request, who: Annotated[Principal, Depends(caller)]) -> Response:
    """Mint a bearer token; the raw token is in this answer only (store it now)."""
    f = Fields(await read_json(request))
    name, role = f.key("name"), f.key("role")
    identity = identity_of(request)
    try:
        info, raw = await identity.create_token(name, role, created_by=who)
    except IdentityError as exc:
        raise bad_request(str(exc)) from None
    except PermissionError as exc:
        await identity.audit(who, "token.create", target=None, outcome="denied", detail={"role": role})
        raise ApiError(403, "forbidden", str(exc)) from None
    await identity.audit(
        who, "token.create", target=info.id, outcome="allowed", detail={"name": name, "role": role}
    )
    return ok({"token": raw, "info": info.as_json()}, 201)


@router.get("/tokens")
async def list_tokens(request: Request) -> Response:
    return ok({"items": [t.as_json() for t in await identity_of(request).list_tokens()]})


@router.post("/tokens/{token_id}/revoke")
async def revoke_token(
    request: Request, token_id: str, who: Annotated[Principal, Depends(caller)]
) -> Response:
    identity = identity_of(request)
    try:
        revoked = await identity.revoke(token_id)
    except IdentityError:
        raise not_found("token", token_id) from None
    await identity.audit(who, "token.revoke", target=token_id, outcome="allowed", detail={"revoked": revoked})
    info = next(t for t in await identity.list_tokens() if t.id == token_id)
    return ok({"revoked": revoked, "info": info.as_json()})


@router.get("/audit")
async def list_audit(
    request: Request,
    target: Annotated[str | None, Query(max_length=500)] = None,
    limit: Annotated[int, Query(ge=1, le=1000)] = 100,
) -> Response:
    """Decisions, token changes and denied attempts, newest first."""
    return ok({"items": await identity_of(request).list_audit(target=target, limit=limit)})


# -- pyworkflow hooks -------------------------------------------------------------------------


def _hook_view(wait: Any) -> dict[str, Any]:
    return {
        "id": wait.id,
        "run_id": wait.run_id,
        "kind": wait.kind.value,
        "name": wait.name,
        "step_key": wait.step_key,
        "created_at": wait.created_at,
        "expires_at": wait.expires_at,
    }


@router.get("/hooks")
async def list_hooks(request: Request, limit: Annotated[int, Query(ge=1, le=1000)] = 100) -> Response:
    """Pending pyworkflow hooks and step hooks in this server's database, oldest first."""
    waits = await store_of(request).pyworkflow.list_waits(
        status=WaitStatus.PENDING, kinds=(WaitKind.HOOK, WaitKind.STEP_HOOK), limit=limit
    )
    return ok({"items": [_hook_view(w) for w in waits]})


@router.post("/hooks/{hook_id}/resume", openapi_extra=_doc({"payload": {}}, []))
async def resume_hook(request: Request, hook_id: str, who: Annotated[Principal, Depends(caller)]) -> Response:
    """Deliver ``payload`` to a pending hook (an operator's answer, authorized by role instead of
    the hook's token). The run continues on whatever pyworkflow runtime serves this database."""
    f = Fields(await read_json(request))
    payload = f.data.get("payload")
    store = store_of(request).pyworkflow
    wait = await store.get_wait(hook_id)
    if wait is None or wait.kind not in (WaitKind.HOOK, WaitKind.STEP_HOOK):
        raise not_found("hook", hook_id)
    identity = identity_of(request)
    try:
        data = validate_payload(wait, payload)
        resolved = await store.resolve_wait(wait_id=hook_id, payload=data, now=time.time())
    except pyworkflow.HookError as exc:
        await identity.audit(who, "hook.resume", target=hook_id, outcome="refused", detail=str(exc))
        code = "payload_invalid" if isinstance(exc, pyworkflow.PayloadValidationError) else "hook_not_pending"
        raise ApiError(422 if code == "payload_invalid" else 409, code, str(exc)) from None
    await identity.audit(who, "hook.resume", target=hook_id, outcome="allowed", detail={"payload": payload})
    return ok(
        {
            "run_id": resolved.run_id,
            "hook_id": resolved.id,
            "hook_name": resolved.name,
            "status": resolved.status.value,
        }
    )
