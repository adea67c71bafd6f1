"""Run the server under uvicorn: one process per server (its database has one writer thread);
on PostgreSQL several servers may share the database."""

from __future__ import annotations

import argparse
import asyncio
import contextlib
import socket
import sys
from collections.abc import Sequence
from types import FrameType
from typing import Any

import uvicorn

from pyworkflow import ConfigurationError
from pyworkflow.store import log_format as log_format_of
from pyworkflow.store import log_level as level_of
from pyworkflow.store import metrics, setup_logging, tracing

from ._app import DEFAULT_PORT, Settings, create_app, finish_startup, wrap
from ._dburl import first_line, parse_location, redact
from ._store import GraphStore


def serve(
    host: str = "127.0.0.1",
    port: int = DEFAULT_PORT,
    db_path: str | None = None,
    lease_seconds: float | None = None,
    log_level: str = "warning",
    write_timeout: float | None = None,
    *,
    log_format: str | None = None,
    access_log: bool = False,
    metrics_bind: str | None = None,
    public_url: str | None = None,
    notify: Sequence[str] = (),
    notify_nodes: Sequence[str] = (),
    trusted_proxies: Sequence[str] = (),
    retention: str | None = None,
    audit_retention: str | None = None,
) -> None:
    try:  # --log-format, else $ATFGRAPH_LOG_FORMAT, else text; the write timeout and --notify likewise
        settings = Settings.from_env(
            db_path=db_path,
            lease_seconds=lease_seconds,
            public_url=public_url,
            listen_url=f"http://{host}:{port}",
            notify=notify,
            notify_nodes=notify_nodes,
            write_timeout=write_timeout,
            access_log=access_log,
            trusted_proxies=trusted_proxies,
            retention=retention,
            audit_retention=audit_retention,
        )
        fmt = log_format_of(log_format)
        level_of(log_level)
        metrics_address = parse_bind(metrics_bind) if metrics_bind else None
    except ValueError as exc:
        print(f"atfgraph: {exc}", file=sys.stderr)
        raise SystemExit(2) from None
    if settings.public_url and not settings.public_url.startswith(("http://", "https://")):
        print(
            f"atfgraph: the public URL must start with http:// or https://: {settings.public_url!r}",
            file=sys.stderr,
        )
        raise SystemExit(2)
    try:  # --db, else $ATFGRAPH_DB, else the default file: pyworkflow's grammar of storage locations
        parse_location(settings.db_path)
    except ConfigurationError as exc:
        print(f"atfgraph: bad database location: {exc}", file=sys.stderr)
        raise SystemExit(2) from None
    setup_logging(log_level, fmt)
    try:  # OTEL_TRACES_EXPORTER: spans to a collector (docs/operations.md, Tracing)
        tracing.setup_from_env()
    except ConfigurationError as exc:
        print(f"atfgraph: {exc}", file=sys.stderr)
        raise SystemExit(2) from None
    print(
        f"atfgraph server on http://{host}:{port} (db {redact(settings.db_path)})",
        file=sys.stderr,
        flush=True,
    )
    if settings.trusted_proxies:
        note = f"atfgraph: forwarding headers believed from {settings.trusted_proxies}"
        if settings.notify.endpoints and not settings.public_url:  # no request to take it from
            note += f"; notifications link to {settings.listen_url}: set --public-url"
        print(note, file=sys.stderr, flush=True)
    _check_database(settings)
    app = create_app(settings)
    if metrics_address is not None:
        try:
            bound = metrics.start_metrics_server(metrics_address[1], metrics_address[0])
        except OSError as exc:
            print(f"atfgraph: cannot serve metrics on {metrics_bind}: {exc}", file=sys.stderr)
            raise SystemExit(2) from None
        print(f"atfgraph metrics on http://{metrics_address[0]}:{bound}/metrics", file=sys.stderr, flush=True)
    config = uvicorn.Config(
        wrap(app),
        host=host,
        port=port,
        log_level=log_level.lower(),
        # Logging is set up above (setup_logging): uvicorn's records go through the same handler.
        log_config=None,
        # The access log, when asked for, is the server's own (atfgraph.access: route templates).
        access_log=False,
        # Workers and clients keep their connections open between long polls.
        timeout_keep_alive=75,
        lifespan="on",
        timeout_graceful_shutdown=3,
        # Forwarding headers are read by _proxy.ForwardedHeaders, from --trusted-proxy peers only
        # (uvicorn's own reads neither Forwarded nor X-Forwarded-Host, and trusts loopback).
        proxy_headers=False,
    )
    server = _Server(config, app)
    server.run()
    if server.failed:
        raise SystemExit(1)


def _check_database(settings: Settings) -> None:
    """Open the database once before serving (which also migrates it), so that a wrong path or an
    unreachable PostgreSQL is one line and exit status 2, not a startup traceback."""
    try:
        GraphStore(
            settings.db_path,
            lease_seconds=settings.lease_seconds,
            synchronous=settings.synchronous,
            write_timeout=settings.write_timeout,
        ).close()
    except Exception as exc:  # any failure to open it: the message says which
        print(
            f"atfgraph: cannot open the database {redact(settings.db_path)}: {first_line(exc)}",
            file=sys.stderr,
        )
        raise SystemExit(2) from None


class _Server(uvicorn.Server):
    """uvicorn, plus: the work of a first start runs once the port is bound
    (:func:`finish_startup`: a start that cannot bind mints and writes no credentials), and the
    first shutdown signal ends the long polls in flight, so that graceful shutdown finishes
    within its timeout instead of cancelling them."""

    def __init__(self, config: uvicorn.Config, app: Any) -> None:
        super().__init__(config)
        self._fastapi = app
        #: the first start's work failed: the process exits with status 1
        self.failed = False

    async def startup(self, sockets: list[socket.socket] | None = None) -> None:
        await super().startup(sockets)  # exits (status 1) when the port cannot be bound
        if not self.started:
            return
        try:
            await finish_startup(self._fastapi)
        except Exception as exc:  # the database refused the first start's writes
            print(f"atfgraph: cannot finish starting: {first_line(exc)}", file=sys.stderr, flush=True)
            self.failed = self.should_exit = True

    def handle_exit(self, sig: int, frame: FrameType | None) -> None:
        hub = getattr(self._fastapi.state, "hub", None)
        if hub is not None:
            with contextlib.suppress(RuntimeError):  # no loop yet: nothing is waiting
                asyncio.get_running_loop().call_soon(hub.close)
        super().handle_exit(sig, frame)


def main(argv: list[str] | None = None) -> None:
    parser = argparse.ArgumentParser(
        prog="python -m atfgraph.server", description="Run the atfgraph graph server."
    )
    parser.add_argument("--host", default="127.0.0.1", help="interface to listen on (default: loopback)")
    parser.add_argument("--port", type=int, default=DEFAULT_PORT)
    parser.add_argument(
        "--db",
        default=None,
        help="SQLite file, sqlite:///file.db or postgresql:// URL"
        " (default: $ATFGRAPH_DB, else $ATFGRAPH_HOME/atfgraph.db)",
    )
    parser.add_argument("--lease-seconds", type=float, default=None, help="task lease length (default 30)")
    parser.add_argument(
        "--write-timeout",
        type=float,
        default=None,
        help="seconds a write may wait for the database (a lock held elsewhere, PostgreSQL"
        " unreachable) before the request is a 503 database_unavailable"
        " (default: $ATFGRAPH_WRITE_TIMEOUT, else 10)",
    )
    parser.add_argument("--log-level", default="warning", help="debug, info, warning (default), error")
    parser.add_argument(
        "--log-format",
        default=None,
        help="text or json: one JSON object per line (default: $ATFGRAPH_LOG_FORMAT, else text)",
    )
    parser.add_argument(
        "--access-log", action="store_true", help="one INFO record per request (logger atfgraph.access)"
    )
    parser.add_argument(
        "--metrics-bind",
        default=None,
        metavar="HOST:PORT",
        help="also serve GET /metrics on this address, without authentication"
        " (on the main port /metrics needs an owner or administrator token)",
    )
    parser.add_argument(
        "--public-url",
        default=None,
        help="the address people and machines outside reach this server at, e.g. https://review.example.com;"
        " decision links and webhook URLs are built on it (default: $ATFGRAPH_PUBLIC_URL, else the scheme and"
        " host each request came to, and http://HOST:PORT for notifications)",
    )
    parser.add_argument(
        "--notify",
        action="append",
        default=[],
        metavar="URL",
        help="POST a JSON event (with a Slack-compatible 'text') to URL when an approval or hook is created;"
        " repeatable (default: $ATFGRAPH_NOTIFY, space- or comma-separated)",
    )
    parser.add_argument(
        "--notify-node",
        action="append",
        default=[],
        metavar="NODE=URL",
        help="also POST the events of NODE's approvals to URL (its team's channel); repeatable"
        " (default: $ATFGRAPH_NOTIFY_NODES, space- or comma-separated NODE=URL pairs)",
    )
    parser.add_argument(
        "--trusted-proxy",
        action="append",
        default=[],
        metavar="ADDRESS",
        help="believe X-Forwarded-For/-Proto/-Host and Forwarded only from this address or CIDR network"
        " (e.g. 10.0.0.0/8, 127.0.0.1); repeatable (default: $ATFGRAPH_TRUSTED_PROXIES, else none, loopback"
        " included)",
    )
    parser.add_argument(
        "--retention",
        default=None,
        metavar="AGE",
        help="purge runs that finished longer ago than AGE (30d, 12h, 90m) with their events, steps,"
        " waits and checkpoints (default: $ATFGRAPH_RETENTION, else keep every run)",
    )
    parser.add_argument(
        "--audit-retention",
        default=None,
        metavar="AGE",
        help="purge audit entries older than AGE (default: $ATFGRAPH_AUDIT_RETENTION, else keep them)",
    )
    args = parser.parse_args(argv)
    serve(
        args.host,
        args.port,
        args.db,
        args.lease_seconds,
        args.log_level,
        args.write_timeout,
        log_format=args.log_format,
        access_log=args.access_log,
        metrics_bind=args.metrics_bind,
        public_url=args.public_url,
        notify=args.notify,
        notify_nodes=args.notify_node,
        trusted_proxies=args.trusted_proxy,
        retention=args.retention,
        audit_retention=args.audit_retention,
    )


def parse_bind(value: str) -> tuple[str, int]:
    """``HOST:PORT`` (``[::1]:9100`` for IPv6) as (host, port); ``ValueError`` otherwise."""
    host, sep, port = value.rpartition(":")
    host = host.strip("[]")
    if not sep or not host or not port.isdigit() or not 0 <= int(port) <= 65535:
        raise ValueError(f"--metrics-bind must be HOST:PORT, not {value!r}")
    return host, int(port)
