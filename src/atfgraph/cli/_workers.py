"""``atfg workers list``: the workers that registered with the server, newest first, with the
node and version they serve, their permits, what they report (claimed, permits in use) and when
they were last seen."""

from __future__ import annotations

import time
from typing import Any

import click

from ._api import api
from ._base import AliasGroup, global_options
from ._output import emit_list, field, when


@click.group("workers", cls=AliasGroup, aliases={"ls": "list"})
def workers() -> None:
    """Workers: the processes that lease tasks of their node."""


def _stat(name: str) -> Any:
    return lambda w: (w.get("stats") or {}).get(name, "")


def _seen(item: dict[str, Any]) -> str:
    seen = item.get("last_seen")
    if not isinstance(seen, int | float):
        return ""
    return f"{when(seen)} ({max(0.0, time.time() - seen):.0f}s ago)"


@workers.command("list")
@click.option("--node", default=None, metavar="NODE", help="Only the workers of this node.")
@click.option("--limit", default=100, show_default=True, type=click.IntRange(1, 1000))
@global_options
@click.pass_context
def workers_list(ctx: click.Context, node: str | None, limit: int) -> None:
    """Registered workers, with their node, version, capacity and last heartbeat."""
    items = api(ctx).get("/workers", {"limit": limit})["items"]
    if node is not None:
        items = [w for w in items if w.get("node_id") == node]
    emit_list(
        ctx,
        items,
        [
            ("ID", field("id")),
            ("NODE", field("node_id")),
            ("VERSION", field("version")),
            ("CAPACITY", field("capacity")),
            ("IN USE", _stat("permits_in_use")),
            ("CLAIMED", _stat("claimed")),
            ("REGISTERED", lambda w: when(w.get("registered_at"))),
            ("LAST SEEN", _seen),
        ],
    )
