"""The addresses the server hands out: its public URL, and a decision link's or a webhook's."""

from __future__ import annotations

from fastapi import Request

from ._links import Link, LinkKind


def public_url(request: Request) -> str:
    """The server's address as people and machines outside reach it: ``--public-url`` or
    ``$ATFGRAPH_PUBLIC_URL`` when set, else the scheme and host this request came to (as a
    trusted proxy received it, ``_proxy.ForwardedHeaders``; an untrusted peer's forwarding
    headers change nothing)."""
    configured: str = getattr(request.app.state.settings, "public_url", "") or ""
    return (configured or str(request.base_url)).rstrip("/")


def link_url(request: Request, link: Link, secret: str) -> str:
    """Where a link is used: a decision link's page (its secret is the last segment) or a
    webhook's delivery route."""
    if link.kind is LinkKind.PAGE:
        return f"{public_url(request)}/d/{secret}"
    return f"{public_url(request)}/api/v2/webhooks/{link.id}"


__all__ = ["link_url", "public_url"]
