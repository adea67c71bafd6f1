"""``atfg approvals link create|list|revoke`` and ``atfg hooks webhook``: decision links for
reviewers without a token, and signed webhooks for machines (docs/reviewers.md)."""

from __future__ import annotations

from typing import Any

import click

from .._transport import q
from ._api import api
from ._approvals import approvals, hooks
from ._base import AliasGroup, global_options
from ._output import emit_list, emit_record, field, progress, when

_EXPIRES = click.option(
    "--expires-in",
    "expires_in",
    default=None,
    type=click.FloatRange(min=1),
    metavar="SECONDS",
    help="How long it works (default: a day; never longer than the wait itself).",
)
_LABEL = click.option("--label", default=None, help="A note for the record: whom it was sent to.")


def _rows(link: dict[str, Any]) -> list[tuple[str, Any]]:
    return [
        ("id", link["id"]),
        ("kind", link["kind"]),
        ("wait", link["wait_id"]),
        ("state", link["state"]),
        ("label", link.get("label")),
        ("created by", link.get("created_by")),
        ("expires", when(link.get("expires_at"))),
        ("used", when(link.get("used_at"))),
        ("decision", link.get("decision")),
        ("revoked", when(link.get("revoked_at"))),
    ]


def _body(expires_in: float | None, label: str | None) -> dict[str, Any]:
    return {"expires_in_seconds": expires_in, "label": label}


@approvals.group("link", cls=AliasGroup, aliases={"new": "create", "ls": "list", "rm": "revoke"})
def link() -> None:
    """Decision links: a single-use URL that decides one approval, for a reviewer without a token."""


@link.command("create")
@click.argument("approval_id", metavar="APPROVAL_ID")
@_EXPIRES
@_LABEL
@global_options
@click.pass_context
def link_create(ctx: click.Context, approval_id: str, expires_in: float | None, label: str | None) -> None:
    """Mint a decision link for a pending approval; prints its URL (shown only now)."""
    answer = api(ctx).post(f"/approvals/{q(approval_id)}/links", _body(expires_in, label))
    progress(f"decision link {answer['link']['id']}: works once, until {when(answer['link']['expires_at'])}")
    emit_record(ctx, answer, [("url", answer["url"]), *_rows(answer["link"])])


@link.command("list")
@click.argument("approval_id", metavar="APPROVAL_ID")
@global_options
@click.pass_context
def link_list(ctx: click.Context, approval_id: str) -> None:
    """The decision links and webhooks of one wait (never their secrets)."""
    items = api(ctx).get(f"/approvals/{q(approval_id)}/links")["items"]
    emit_list(
        ctx,
        items,
        [
            ("ID", field("id")),
            ("KIND", field("kind")),
            ("STATE", field("state")),
            ("LABEL", field("label")),
            ("CREATED BY", field("created_by")),
            ("EXPIRES", lambda x: when(x.get("expires_at"))),
            ("DECISION", field("decision")),
        ],
    )


@link.command("revoke")
@click.argument("link_id", metavar="LINK_ID")
@global_options
@click.pass_context
def link_revoke(ctx: click.Context, link_id: str) -> None:
    """Revoke a decision link or a webhook: it decides nothing any more."""
    answer = api(ctx).post(f"/links/{q(link_id)}/revoke", {})
    progress(f"revoked {answer['link']['kind']} link {link_id}")
    emit_record(ctx, answer, _rows(answer["link"]))


@hooks.command("webhook")
@click.argument("wait_id", metavar="WAIT_ID")
@_EXPIRES
@_LABEL
@global_options
@click.pass_context
def hooks_webhook(ctx: click.Context, wait_id: str, expires_in: float | None, label: str | None) -> None:
    """Mint a webhook for a pending hook or approval: prints its URL and signing secret (shown
    only now). Revoke it with ``atfg approvals link revoke``."""
    answer = api(ctx).post(f"/waits/{q(wait_id)}/webhooks", _body(expires_in, label))
    progress(f"webhook {answer['link']['id']}: sign each POST with the secret (docs/reviewers.md)")
    emit_record(ctx, answer, [("url", answer["url"]), ("secret", answer["secret"]), *_rows(answer["link"])])
