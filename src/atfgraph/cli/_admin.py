"""``atfg tokens create|list|revoke`` and ``atfg audit list``: who may do what, and who did."""

from __future__ import annotations

from typing import Any

import click

from .._transport import q
from ._api import api
from ._base import (
    AliasGroup,
    global_options,
    output_format,
)
from ._db import mint_offline
from ._output import compact, emit_list, emit_record, field, progress, when
from ._paging import fetch, paging_options

ROLES = ["owner", "administrator", "reviewer", "worker"]


@click.group("tokens", cls=AliasGroup, aliases={"ls": "list", "new": "create", "rm": "revoke"})
def tokens() -> None:
    """Bearer tokens: mint one for a person or a worker, list them, revoke one."""


def _token_rows(info: dict[str, Any]) -> list[tuple[str, Any]]:
    return [
        ("id", info.get("id")),
        ("name", info.get("name")),
        ("role", info.get("role")),
        ("created", when(info.get("created_at"))),
        ("created by", info.get("created_by")),
        ("last used", when(info.get("last_used_at"))),
        ("revoked", when(info.get("revoked_at"))),
    ]


@tokens.command("create")
@click.argument("name")
@click.option("--role", required=True, type=click.Choice(ROLES), help="What the token may do.")
@click.option(
    "--db",
    "db_path",
    default=None,
    help="Mint it offline, directly in this database (SQLite file or postgresql:// URL), with no"
    " server and no token: the recovery of a locked-out owner, run on the server's host.",
)
@global_options
@click.pass_context
def tokens_create(ctx: click.Context, name: str, role: str, db_path: str | None) -> None:
    """Mint a token. With -o table only the raw token goes to stdout (TOKEN=$(atfg tokens create
    ...)); it is shown once and never stored by the server. With --db the token is written
    straight into the database (recorded in the audit trail as created offline)."""
    if db_path is not None:
        info, raw = mint_offline(db_path, name, role)
        answer: dict[str, Any] = {"token": raw, "info": info}
    else:
        answer = api(ctx).post("/tokens", {"name": name, "role": role})
    info = answer["info"]
    progress(f"created token {info['id']} ({info['name']}, {info['role']}); it is shown once, store it now")
    if output_format(ctx) == "table":
        click.echo(answer["token"])
    else:
        emit_record(ctx, answer, [])


@tokens.command("list")
@paging_options()
@global_options
@click.pass_context
def tokens_list(ctx: click.Context, limit: int, after: str | None, every: bool) -> None:
    """Every token, revoked ones too (never the secrets), oldest first."""
    items = fetch(api(ctx), "/tokens", {}, limit, after, every)
    emit_list(
        ctx,
        items,
        [
            ("ID", field("id")),
            ("NAME", field("name")),
            ("ROLE", field("role")),
            ("CREATED", lambda t: when(t.get("created_at"))),
            ("CREATED BY", field("created_by")),
            ("LAST USED", lambda t: when(t.get("last_used_at"))),
            ("REVOKED", lambda t: when(t.get("revoked_at"))),
        ],
    )


@tokens.command("revoke")
@click.argument("token_id", metavar="ID")
@global_options
@click.pass_context
def tokens_revoke(ctx: click.Context, token_id: str) -> None:
    """Revoke a token; requests carrying it are refused from now on."""
    answer = api(ctx).post(f"/tokens/{q(token_id)}/revoke", {})
    info = answer["info"]
    progress(
        f"revoked token {info['id']}" if answer["revoked"] else f"token {info['id']} was already revoked"
    )
    emit_record(ctx, answer, _token_rows(info))


# -- audit -----------------------------------------------------------------------------------------


@click.group("audit", cls=AliasGroup, aliases={"ls": "list"})
def audit() -> None:
    """The audit trail: decisions, denied attempts and token administration."""


@audit.command("list")
@click.option("--target", default=None, help="Only entries about this object (an approval id, ...).")
@click.option("--action", default=None, help="Only this action (approval.decide, token.create, ...).")
@paging_options()
@global_options
@click.pass_context
def audit_list(
    ctx: click.Context, target: str | None, action: str | None, limit: int, after: str | None, every: bool
) -> None:
    """Audit entries, newest first, a page at a time."""
    params: dict[str, Any] = {}
    if target is not None:
        params["target"] = target
    if action is not None:
        params["action"] = action
    items = fetch(api(ctx), "/audit", params, limit, after, every)
    emit_list(
        ctx,
        items,
        [
            ("AT", lambda e: when(e.get("at"))),
            ("PRINCIPAL", field("principal")),
            ("ROLE", field("role")),
            ("ACTION", field("action")),
            ("TARGET", field("target")),
            ("OUTCOME", field("outcome")),
            ("DETAIL", lambda e: compact(e.get("detail")) if e.get("detail") is not None else None),
        ],
    )
