"""The decision link page, ``/d/<secret>``: the one approval a link names, for a reviewer who got
the link by e-mail or chat and holds no token. GET shows the question and, while the link is
live, approve and reject (a mail scanner that fetches the link decides nothing); POST decides
through the service layer (``Service.decide_by_link``), which uses the link in the transaction
of the decision. A used, revoked or expired link says so (410); an unknown one is 404."""

from __future__ import annotations

import time
from typing import Any

import orjson
from fastapi import APIRouter, Request, Response
from starlette.datastructures import FormData

from ..._json import dumps
from .._links import Link, LinkState
from .._refusals import NotFound, Refusal
from ._answers import parse_json_text
from ._common import _client, _form, _service, _store, _text, render

router = APIRouter(include_in_schema=False)

_NOT_LIVE = {
    LinkState.USED: "This link was already used",
    LinkState.REVOKED: "This link was revoked",
    LinkState.EXPIRED: "This link has expired",
}


_TITLES = {LinkState.USED: "Link used", LinkState.REVOKED: "Link revoked", LinkState.EXPIRED: "Link expired"}


def _approval(request: Request, link: Link) -> dict[str, Any] | None:
    try:
        view = _store(request).get_approval(link.wait_id)
    except NotFound:
        return None
    decoded: dict[str, Any] = orjson.loads(orjson.dumps(view))  # stored JSON is embedded as fragments
    return decoded


def _page(request: Request, link: Link | None, status: int, title: str, **context: Any) -> Response:
    state = "unknown" if link is None else link.state(time.time()).value
    approval = None if link is None else _approval(request, link)
    values: dict[str, Any] = {"message": None, "error": False, "done": False, "response_text": ""}
    values.update(context)
    response = render(
        request, "link.html", None, status, title=title, state=state, link=link, approval=approval, **values
    )
    # The secret is in the path: never cached, never sent on as a referrer (SecurityHeaders).
    response.headers["x-robots-tag"] = "noindex"
    return response


def _unknown(request: Request) -> Response:
    return _page(
        request, None, 404, "Link not valid", message="This decision link is not valid. Ask for a new one."
    )


def _not_live(request: Request, link: Link) -> Response:
    state = link.state(time.time())
    message = _NOT_LIVE[state]
    if state is LinkState.USED and link.used_at is not None:
        message += f" ({link.decision})."
    else:
        message += "."
    return _page(request, link, 410, _TITLES[state], message=message)


@router.get("/d/{secret}")
async def link_page(request: Request, secret: str) -> Response:
    link = _service(request).links.by_secret(secret)
    if link is None:
        return _unknown(request)
    if link.state(time.time()) is not LinkState.LIVE:
        return _not_live(request, link)
    approval = _approval(request, link)
    if approval is None or approval["status"] != "pending":
        status = "gone" if approval is None else approval["status"]
        return _page(
            request, link, 410, "Already decided", message=f"This approval is {status}; nothing to decide."
        )
    return _page(request, link, 200, "Decision requested")


@router.post("/d/{secret}")
async def link_decide(request: Request, secret: str) -> Response:
    form: FormData = await _form(request)
    service = _service(request)
    link = service.links.by_secret(secret)
    if link is None:
        await service.identity.audit(
            None,
            "approval.decide",
            target="/d/",
            outcome="denied",
            detail="unknown decision link",
            client=_client(request),
        )
        return _unknown(request)
    decision = _text(form, "decision")
    text = _text(form, "response")
    try:
        response = parse_json_text(text, note_key="note")
    except ValueError as exc:
        return _page(
            request,
            link,
            422,
            "Decision requested",
            message=f"Not recorded: the response is {exc}",
            error=True,
            response_text=text,
        )
    stored = None if response is None else dumps(response)
    try:
        approval = await service.decide_by_link(link, decision, stored)
    except Refusal as exc:
        if exc.code.startswith("link_"):
            return _not_live(request, service.links.get(link.id))
        return _page(request, link, 409, "Not recorded", message=f"Not recorded: {exc.message}", error=True)
    return _page(
        request,
        service.links.get(link.id),
        200,
        "Decision recorded",
        message=f"Thank you: {approval['status']}. The run continues. This link cannot be used again.",
        done=True,
    )


__all__ = ["router"]
