"""Run the server under uvicorn: one process per server (its database has one writer thread);
on PostgreSQL several servers may share the database."""

from __future__ import annotations

import argparse
import asyncio
import contextlib
import logging
import sys
from collections.abc import Sequence
from types import FrameType
from typing import Any

import uvicorn

from pyworkflow import ConfigurationError

from ._app import DEFAULT_PORT, Settings, create_app, wrap
from ._dburl import first_line, parse_location, redact
from ._store import GraphStore


def serve(
    host: str = "127.0.0.1",
    port: int = DEFAULT_PORT,
    db_path: str | None = None,
    lease_seconds: float | None = None,
    log_level: str = "warning",
    public_url: str | None = None,
    notify: Sequence[str] = (),
) -> None:
    try:
        settings = Settings.from_env(
            db_path=db_path,
            lease_seconds=lease_seconds,
            public_url=public_url,
            listen_url=f"http://{host}:{port}",
            notify=notify,
        )
    except ValueError as exc:  # --notify, $ATFGRAPH_NOTIFY and companions
        print(f"atfgraph: {exc}", file=sys.stderr)
        raise SystemExit(2) from None
    if not settings.public_url.startswith(("http://", "https://")):  # --public-url, $ATFGRAPH_PUBLIC_URL
        print(
            f"atfgraph: the public URL must start with http:// or https://: {settings.public_url!r}",
            file=sys.stderr,
        )
        raise SystemExit(2)
    logging.basicConfig(level=log_level.upper(), stream=sys.stderr, format="%(asctime)s %(name)s %(message)s")
    try:  # --db, else $ATFGRAPH_DB, else the default file: pyworkflow's grammar of storage locations
        parse_location(settings.db_path)
    except ConfigurationError as exc:
        print(f"atfgraph: bad database location: {exc}", file=sys.stderr)
        raise SystemExit(2) from None
    print(
        f"atfgraph server on http://{host}:{port} (db {redact(settings.db_path)})",
        file=sys.stderr,
        flush=True,
    )
    _check_database(settings)
    app = create_app(settings)
    config = uvicorn.Config(
        wrap(app),
        host=host,
        port=port,
        log_level=log_level,
        access_log=False,
        # Workers and clients keep their connections open between long polls.
        timeout_keep_alive=75,
        lifespan="on",
        timeout_graceful_shutdown=3,
        # Loopback by default: forwarded-for headers are not trusted.
        proxy_headers=False,
    )
    _Server(config, app).run()


def _check_database(settings: Settings) -> None:
    """Open the database once before serving (which also migrates it), so that a wrong path or an
    unreachable PostgreSQL is one line and exit status 2, not a startup traceback."""
    try:
        GraphStore(
            settings.db_path, lease_seconds=settings.lease_seconds, synchronous=settings.synchronous
        ).close()
    except Exception as exc:  # any failure to open it: the message says which
        print(
            f"atfgraph: cannot open the database {redact(settings.db_path)}: {first_line(exc)}",
            file=sys.stderr,
        )
        raise SystemExit(2) from None


class _Server(uvicorn.Server):
    """uvicorn, plus: the first shutdown signal ends the long polls in flight, so that graceful
    shutdown finishes within its timeout instead of cancelling them."""

    def __init__(self, config: uvicorn.Config, app: Any) -> None:
        super().__init__(config)
        self._fastapi = app

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
    parser.add_argument("--log-level", default="warning")
    parser.add_argument(
        "--public-url",
        default=None,
        help="the address people and machines outside reach this server at, e.g. https://review.example.com;"
        " decision links and webhook URLs are built on it (default: $ATFGRAPH_PUBLIC_URL, else http://HOST:PORT)",
    )
    parser.add_argument(
        "--notify",
        action="append",
        default=[],
        metavar="URL",
        help="POST a JSON event (with a Slack-compatible 'text') to URL when an approval or hook is created;"
        " repeatable (default: $ATFGRAPH_NOTIFY, space- or comma-separated)",
    )
    args = parser.parse_args(argv)
    serve(args.host, args.port, args.db, args.lease_seconds, args.log_level, args.public_url, args.notify)
