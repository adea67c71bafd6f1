"""``atfg server start``: the graph server in the foreground."""

from __future__ import annotations

import click

from ._base import AliasGroup

#: The server's port; the server package itself is imported only by ``server start`` (FastAPI).
DEFAULT_PORT = 7878


@click.group("server", cls=AliasGroup)
def server() -> None:
    """Run the graph server."""


@server.command("start")
@click.option("--host", default="127.0.0.1", show_default=True, help="Interface to listen on.")
@click.option("--port", default=DEFAULT_PORT, show_default=True, type=int)
@click.option(
    "--db",
    default=None,
    help="SQLite file or postgresql:// URL (default: $ATFGRAPH_DB, else $ATFGRAPH_HOME/atfgraph.db).",
)
@click.option("--lease-seconds", default=None, type=float, help="Task lease length (default 30).")
@click.option(
    "--write-timeout",
    default=None,
    type=click.FloatRange(min=0, min_open=True),
    help="Seconds a write may wait for the database before the request is a 503"
    " (default: $ATFGRAPH_WRITE_TIMEOUT, else 10).",
)
@click.option("--log-level", default="warning", show_default=True)
@click.option(
    "--log-format",
    type=click.Choice(["text", "json"]),
    default=None,
    help="text, or one JSON object per line (default: $ATFGRAPH_LOG_FORMAT, else text).",
)
@click.option("--access-log", is_flag=True, help="One INFO record per request (logger atfgraph.access).")
@click.option(
    "--metrics-bind",
    default=None,
    metavar="HOST:PORT",
    help="Also serve GET /metrics here, without authentication (on the main port it needs an "
    "owner or administrator token).",
)
@click.option(
    "--public-url",
    default=None,
    metavar="URL",
    help="Address people and machines outside reach the server at; decision links and webhook URLs "
    "are built on it (default: $ATFGRAPH_PUBLIC_URL, else the scheme and host each request came to).",
)
@click.option(
    "--trusted-proxy",
    "trusted_proxies",
    multiple=True,
    metavar="ADDRESS",
    help="Believe X-Forwarded-* and Forwarded headers only from this address or CIDR network; "
    "repeatable (default: $ATFGRAPH_TRUSTED_PROXIES, else none, loopback included).",
)
@click.option(
    "--notify",
    multiple=True,
    metavar="URL",
    help="POST a JSON event (with a Slack-compatible 'text') to URL when an approval or hook is created; "
    "repeatable (default: $ATFGRAPH_NOTIFY).",
)
@click.option(
    "--notify-node",
    "notify_nodes",
    multiple=True,
    metavar="NODE=URL",
    help="Also POST the events of NODE's approvals to URL; repeatable (default: $ATFGRAPH_NOTIFY_NODES).",
)
@click.option(
    "--retention",
    default=None,
    metavar="AGE",
    help="Purge runs that finished longer ago than AGE (30d, 12h, 90m) (default: $ATFGRAPH_RETENTION, "
    "else keep every run).",
)
@click.option(
    "--audit-retention",
    default=None,
    metavar="AGE",
    help="Purge audit entries older than AGE (default: $ATFGRAPH_AUDIT_RETENTION, else keep them).",
)
def start(
    host: str,
    port: int,
    db: str | None,
    lease_seconds: float | None,
    write_timeout: float | None,
    log_level: str,
    log_format: str | None,
    access_log: bool,
    metrics_bind: str | None,
    public_url: str | None,
    notify: tuple[str, ...],
    notify_nodes: tuple[str, ...],
    trusted_proxies: tuple[str, ...],
    retention: str | None,
    audit_retention: str | None,
) -> None:
    """Start the graph server in the foreground."""
    from ..server import serve

    serve(host, port, db, lease_seconds, log_level, write_timeout, log_format=log_format,
          access_log=access_log, metrics_bind=metrics_bind, public_url=public_url,
          notify=notify, notify_nodes=notify_nodes, trusted_proxies=trusted_proxies, retention=retention,
          audit_retention=audit_retention)  # fmt: skip
