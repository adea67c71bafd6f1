"""HTTP API v2: decision links and webhooks on one wait (docs/reviewers.md, "Decisions from
anywhere"). Minting, listing and revoking need a token (``_auth.RULES``); the signed webhook
delivery ``POST /api/v2/webhooks/{id}`` is authenticated by its signature instead."""

from __future__ import annotations

import time
from typing import Annotated, Any

from fastapi import APIRouter, Depends, Request, Response

from . import _schemas as S
from ._auth import Principal, caller
from ._body import Fields, parse_object, read_raw
from ._body_schema import JSON, number, text
from ._errors import ApiError
from ._identity import Identity
from ._links import MAX_LABEL, MAX_LINK_SECONDS, LinkKind
from ._routes import _doc, ok, service_of
from ._urls import link_url, public_url

router = APIRouter(prefix="/api/v2")

#: The headers of a signed webhook delivery.
TIMESTAMP_HEADER = "x-atfg-timestamp"
SIGNATURE_HEADER = "x-atfg-signature"

_MINT = _doc({"expires_in_seconds": number(MAX_LINK_SECONDS, positive=True), "label": text(MAX_LABEL)}, [])


async def _mint(request: Request, who: Principal, kind: LinkKind, wait_id: str) -> dict[str, Any]:
    raw = await read_raw(request)  # no body at all: the defaults
    f = Fields(parse_object(raw) if raw.strip() else {})
    link, secret = await service_of(request).mint_link(
        who,
        kind,
        wait_id,
        f.number("expires_in_seconds", required=False, maximum=1e12),
        f.data.get("label"),
    )
    return {"link": link.as_json(), "url": link_url(request, link, secret), "secret": secret}


@router.post(
    "/approvals/{approval_id}/links", status_code=201, response_model=S.LinkCreated, openapi_extra=_MINT
)
async def create_link(
    request: Request, approval_id: str, who: Annotated[Principal, Depends(caller)]
) -> Response:
    """Mint a decision link for a pending approval: an unguessable, single-use URL that opens a
    page to approve or reject it, for a reviewer without a token. ``url`` is in this answer
    only (only its digest is stored); ``expires_in_seconds`` defaults to a day."""
    minted = await _mint(request, who, LinkKind.PAGE, approval_id)
    del minted["secret"]  # it is the last segment of the url
    return ok(minted, 201)


@router.get("/approvals/{approval_id}/links", response_model=S.LinkList)
async def list_links(request: Request, approval_id: str) -> Response:
    """The decision links and webhooks of one wait (never their secrets)."""
    now = time.time()
    return ok({"items": [link.as_json(now) for link in await service_of(request).links_of(approval_id)]})


@router.post("/links/{link_id}/revoke", response_model=S.LinkRevoked)
async def revoke_link(request: Request, link_id: str, who: Annotated[Principal, Depends(caller)]) -> Response:
    """Revoke a decision link or a webhook: it no longer decides or resumes anything."""
    return ok({"link": (await service_of(request).revoke_link(who, link_id)).as_json()})


@router.post(
    "/waits/{wait_id}/webhooks", status_code=201, response_model=S.WebhookCreated, openapi_extra=_MINT
)
async def create_webhook(
    request: Request, wait_id: str, who: Annotated[Principal, Depends(caller)]
) -> Response:
    """Mint a webhook for a pending approval or pyworkflow hook: ``url`` takes a signed POST
    (see ``POST /webhooks/{id}``); ``secret`` signs it and is in this answer only."""
    return ok(await _mint(request, who, LinkKind.WEBHOOK, wait_id), 201)


@router.get("/waits/{wait_id}/webhooks", response_model=S.LinkList)
async def list_webhooks(request: Request, wait_id: str) -> Response:
    now = time.time()
    links = await service_of(request).links_of(wait_id, LinkKind.WEBHOOK)
    return ok({"items": [link.as_json(now) for link in links]})


@router.post(
    "/webhooks/{link_id}",
    response_model=S.WebhookDelivered,
    openapi_extra=_doc(
        {"decision": {"enum": ["approved", "rejected"]}, "response": JSON, "payload": JSON}, []
    ),
)
async def deliver_webhook(request: Request, link_id: str) -> Response:
    """Resume the webhook's wait. Signed, not bearer-authenticated: ``X-Atfg-Timestamp`` (Unix
    seconds, within 300 s of the server's clock) and ``X-Atfg-Signature: sha256=<hex
    HMAC-SHA256(secret, "<timestamp>.<raw body>")>``. An approval takes ``{"decision",
    "response"}``, a hook ``{"payload"}`` (checked against its schema). The same body again
    answers 200 as the first time; a different decision or payload is 409. A bad signature is
    401 and changes nothing."""
    raw = await read_raw(request)
    service = service_of(request)
    link = await service.links.verify_webhook(
        link_id,
        request.headers.get(TIMESTAMP_HEADER),
        request.headers.get(SIGNATURE_HEADER),
        raw,
        time.time(),
    )
    if link is None:
        identity: Identity = request.app.state.identity
        await identity.audit(
            None,
            "wait.webhook.resume",
            target=link_id,
            outcome="denied",
            detail="bad signature",
            client=request.client.host if request.client else None,
        )
        raise ApiError(
            401,
            "unauthenticated",
            "the webhook signature is missing, stale or wrong (X-Atfg-Timestamp, X-Atfg-Signature)",
        )
    return ok(await service.resume_by_webhook(link, parse_object(raw)))


__all__ = ["SIGNATURE_HEADER", "TIMESTAMP_HEADER", "public_url", "router"]
