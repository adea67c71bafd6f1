"""``atfg``: the command line. ``atfg server start`` runs the graph server; ``atfg ps`` lists
traversers (waiting ones by default). Data goes to stdout, logs to stderr."""

from __future__ import annotations

import asyncio
import json
from typing import Any

import click

from .server import DEFAULT_PORT


@click.group()
def main() -> None:
    """atfgraph command line."""


@main.group()
def server() -> None:
    """Run the graph server."""


@server.command("start")
@click.option("--host", default="127.0.0.1", show_default=True, help="Interface to listen on.")
@click.option("--port", default=DEFAULT_PORT, show_default=True, type=int)
@click.option("--db", default=None, help="SQLite file (default: $ATFGRAPH_HOME/atfgraph.db).")
@click.option("--lease-seconds", default=None, type=float, help="Task lease length (default 30).")
@click.option("--log-level", default="warning", show_default=True)
def start(host: str, port: int, db: str | None, lease_seconds: float | None, log_level: str) -> None:
    """Start the graph server in the foreground."""
    from .server import serve

    serve(host, port, db, lease_seconds, log_level)


_STATUSES = ["queued", "running", "waiting", "succeeded", "failed", "cancelled"]


@main.command("ps")
@click.option("--status", default="waiting", show_default=True, type=click.Choice(_STATUSES))
@click.option("--limit", default=100, show_default=True, type=click.IntRange(1, 1000))
@click.option(
    "-o", "--output", default="table", show_default=True, type=click.Choice(["table", "json", "jsonl"])
)
@click.option("--server", "server_url", default=None, help="Server URL (default: $ATFGRAPH_SERVER).")
def ps(status: str, limit: int, output: str, server_url: str | None) -> None:
    """List traversers in one status, newest first (waiting ones by default)."""
    from ._client import Client

    async def fetch() -> list[dict[str, Any]]:
        async with Client(server_url) as client:
            items: list[dict[str, Any]] = (
                await client.request("GET", "/traversers", params={"status": status, "limit": limit})
            )["items"]
            return items

    items = asyncio.run(fetch())
    if output == "json":
        click.echo(json.dumps(items, indent=2))
    elif output == "jsonl":
        for item in items:
            click.echo(json.dumps(item))
    else:
        click.echo(f"{'ID':<32}  {'TARGET':<32}  {'STATUS':<9}  {'ATTEMPT':>7}  WAITING ON")
        for item in items:
            click.echo(
                f"{item['id']:<32}  {item['target'][:32]:<32}  {item['status']:<9}  "
                f"{item['attempt']:>7}  {item['waiting_on'] or ''}"
            )
