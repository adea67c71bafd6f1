"""The console's Notifications page (owners and administrators): the dead-letter list of
created-wait events that exhausted their attempts, and the pending and delivered ones."""

from __future__ import annotations

from fastapi import APIRouter, Request, Response

from .._identity import Permission
from .._notify import DELIVERY_STATUSES, Notifier
from ._common import _reader, error_page, render

router = APIRouter(include_in_schema=False)


@router.get("/notifications")
async def notifications(request: Request, status: str = "dead") -> Response:
    auth = await _reader(request)
    if not auth.principal.can(Permission.ADMINISTER):
        return error_page(
            request, 403, "Not allowed", "Notifications are for owners and administrators.", auth
        )
    if status not in DELIVERY_STATUSES:
        return error_page(request, 404, "Not found", f"No such list: {status[:50]!r}.", auth)
    notifier: Notifier = request.app.state.notifier
    return render(
        request,
        "notifications.html",
        auth,
        items=notifier.list(status, 200),
        listed=status,
        statuses=DELIVERY_STATUSES,
        endpoints=notifier.settings.endpoints,
        node_endpoints=notifier.settings.node_endpoints,
    )


__all__ = ["router"]
