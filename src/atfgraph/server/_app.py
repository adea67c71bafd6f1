"""The graph server application: store, long-poll hub, sweeper and the one error shape."""

from __future__ import annotations

import asyncio
import contextlib
import logging
import os
import re
import sys
import uuid
from collections.abc import AsyncIterator, Sequence
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any
from urllib.parse import unquote_to_bytes

from fastapi import FastAPI, Request, Response
from fastapi.exceptions import RequestValidationError
from starlette.exceptions import HTTPException as StarletteHTTPException
from starlette.types import ASGIApp, Receive, Scope, Send

from pyworkflow import ConfigurationError
from pyworkflow.store import (
    WRITE_TIMEOUT,
    YOUNG_GC_THRESHOLD,
    QueueVacuum,
    gc_threshold_from_text,
    hold_gc_pace,
    metrics,
)

from .._credentials import CREDENTIALS_FILE
from ._auth import AuthMiddleware
from ._errors import ApiError, api_error, database_refused, database_unavailable
from ._explorer import install_explorer
from ._fastpath import FastPath
from ._hub import Hub, node_key, traverser_key
from ._identity import Identity
from ._notify import Notifier, NotifySettings, check_endpoint, check_node_endpoint
from ._observe import HttpMetrics
from ._openapi import allowed_methods, install_limits
from ._proxy import ForwardedHeaders, TrustedProxies
from ._refusals import Refusal
from ._retention import purge_forever, purge_seconds, retention_setting
from ._routes import error_response, router, unavailable_response
from ._routes_admin import router as admin_router
from ._routes_links import router as links_router
from ._routes_runs import router as runs_router
from ._schemas import Health
from ._service import Service
from ._store import GraphStore
from ._tracing import TraceContext
from .console import install_console

log = logging.getLogger("atfgraph.server")

DEFAULT_PORT = 7878


def default_home() -> Path:
    return Path(os.environ.get("ATFGRAPH_HOME") or Path.home() / ".atfgraph")


def default_db_path() -> str:
    return str(default_home() / "atfgraph.db")


@dataclass(frozen=True, slots=True)
class Settings:
    """Server settings: flag > environment > default."""

    #: a SQLite file, or a ``postgresql://`` URL
    db_path: str
    lease_seconds: float = 30.0
    sweep_seconds: float = 0.25
    synchronous: str = "FULL"
    #: the data directory: the default database and the credentials file of the first start
    home: Path = Path()
    #: the address people and machines outside reach the server at, as configured (--public-url,
    #: else $ATFGRAPH_PUBLIC_URL; "" when neither): it wins over what a request says
    public_url: str = ""
    #: the address the server listens on (``http://HOST:PORT``)
    listen_url: str = ""
    #: the peers whose forwarding headers are believed (--trusted-proxy, $ATFGRAPH_TRUSTED_PROXIES)
    trusted_proxies: TrustedProxies = field(default_factory=TrustedProxies)
    #: seconds a write may wait for the database before the request is a 503
    write_timeout: float = WRITE_TIMEOUT
    #: one INFO record per request on the ``atfgraph.access`` logger
    access_log: bool = False
    #: where and how created waits are announced (--notify, $ATFGRAPH_NOTIFY and companions)
    notify: NotifySettings = field(default_factory=NotifySettings)
    #: retention (docs/operators.md): finished runs older than this many seconds are purged by
    #: the server (--retention, $ATFGRAPH_RETENTION; None: kept), the audit trail separately
    #: (--audit-retention, $ATFGRAPH_AUDIT_RETENTION), a pass every purge_seconds
    retention: float | None = None
    audit_retention: float | None = None
    purge_seconds: float = 60.0
    #: the garbage collector's young-generation threshold while the server runs
    #: ($ATFGRAPH_GC_THRESHOLD, ``none`` to leave the collector alone; pyworkflow/store/_gc.py)
    gc_threshold: int | None = YOUNG_GC_THRESHOLD

    @classmethod
    def from_env(
        cls,
        db_path: str | None = None,
        lease_seconds: float | None = None,
        public_url: str | None = None,
        listen_url: str = "",
        notify: Sequence[str] = (),
        write_timeout: float | None = None,
        access_log: bool = False,
        notify_nodes: Sequence[str] = (),
        trusted_proxies: Sequence[str] = (),
        retention: str | None = None,
        audit_retention: str | None = None,
    ) -> Settings:
        """Settings from the flags given, else the environment, else the defaults; ValueError
        for a write timeout that is not a positive number of seconds, or a trusted proxy that is
        not an address or a network."""
        timeout = write_timeout
        if timeout is None:
            raw = os.environ.get("ATFGRAPH_WRITE_TIMEOUT", "")
            try:
                timeout = float(raw) if raw.strip() else WRITE_TIMEOUT
            except ValueError:
                raise ValueError(f"ATFGRAPH_WRITE_TIMEOUT must be a number of seconds, not {raw!r}") from None
        if not 0 < timeout < float("inf"):
            raise ValueError(f"the write timeout must be a positive number of seconds, not {timeout!r}")
        return cls(
            db_path=db_path or os.environ.get("ATFGRAPH_DB") or default_db_path(),
            lease_seconds=lease_seconds or float(os.environ.get("ATFGRAPH_LEASE_SECONDS", "30")),
            sweep_seconds=float(os.environ.get("ATFGRAPH_SWEEP_SECONDS", "0.25")),
            synchronous=os.environ.get("ATFGRAPH_SQLITE_SYNCHRONOUS", "FULL"),
            home=default_home(),
            public_url=(public_url or os.environ.get("ATFGRAPH_PUBLIC_URL") or "").rstrip("/"),
            listen_url=listen_url.rstrip("/"),
            trusted_proxies=TrustedProxies.from_env(trusted_proxies),
            notify=notify_settings(notify, notify_nodes),
            write_timeout=timeout,
            access_log=access_log,
            retention=retention_setting(retention, "ATFGRAPH_RETENTION"),
            audit_retention=retention_setting(audit_retention, "ATFGRAPH_AUDIT_RETENTION"),
            purge_seconds=purge_seconds(),
            gc_threshold=gc_threshold_setting(),
        )

    @property
    def external_url(self) -> str:
        """The server's address where no request says it (notifications, the credentials file of
        the first start): the public URL, else the listening address. A request's own links
        use :func:`_routes_links.public_url`, which also honours a trusted proxy's headers."""
        return self.public_url or self.listen_url


def gc_threshold_setting() -> int | None:
    """``$ATFGRAPH_GC_THRESHOLD``: an int from 1 (the young generation's threshold while the
    server runs), ``none`` (leave the collector alone), or unset (the default); ValueError."""
    raw = os.environ.get("ATFGRAPH_GC_THRESHOLD", "")
    if not raw.strip():
        return YOUNG_GC_THRESHOLD
    try:
        return gc_threshold_from_text(raw, "$ATFGRAPH_GC_THRESHOLD")
    except ConfigurationError as exc:
        raise ValueError(str(exc)) from None


def notify_settings(flags: Sequence[str] = (), node_flags: Sequence[str] = ()) -> NotifySettings:
    """``--notify`` endpoints, else those of ``$ATFGRAPH_NOTIFY`` (separated by spaces or commas);
    ``--notify-node NODE=URL`` pairs, else those of ``$ATFGRAPH_NOTIFY_NODES`` (likewise); with
    ``$ATFGRAPH_NOTIFY_MAX_ATTEMPTS``, ``$ATFGRAPH_NOTIFY_BACKOFF_SECONDS``,
    ``$ATFGRAPH_NOTIFY_TIMEOUT_SECONDS`` and ``$ATFGRAPH_NOTIFY_POLL_SECONDS``. Raises ValueError."""
    endpoints = list(flags) or os.environ.get("ATFGRAPH_NOTIFY", "").replace(",", " ").split()
    pairs = list(node_flags) or os.environ.get("ATFGRAPH_NOTIFY_NODES", "").replace(",", " ").split()
    default = NotifySettings()

    def number(name: str, value: float, low: float) -> float:
        raw = os.environ.get(name)
        if raw is None:
            return value
        try:
            parsed = float(raw)
        except ValueError:
            parsed = float("nan")
        if not parsed >= low:
            raise ValueError(f"${name} must be a number of at least {low}, not {raw!r}")
        return parsed

    return NotifySettings(
        endpoints=tuple(dict.fromkeys(check_endpoint(url) for url in endpoints)),
        node_endpoints=tuple(dict.fromkeys(check_node_endpoint(pair) for pair in pairs)),
        max_attempts=int(number("ATFGRAPH_NOTIFY_MAX_ATTEMPTS", default.max_attempts, 1)),
        backoff_seconds=number("ATFGRAPH_NOTIFY_BACKOFF_SECONDS", default.backoff_seconds, 0.01),
        timeout_seconds=number("ATFGRAPH_NOTIFY_TIMEOUT_SECONDS", default.timeout_seconds, 0.1),
        poll_seconds=number("ATFGRAPH_NOTIFY_POLL_SECONDS", default.poll_seconds, 0.01),
    )


#: The longest name a path segment may carry (an id, a checkpoint name, a memory scope or key),
#: as pyworkflow's run, hook and wait names. Longer ones are refused before anything reads them.
MAX_PATH_SEGMENT = 200

_SURROGATE = re.compile("[\ud800-\udfff]")


def path_refusal(path: str) -> str | None:
    """Why no resource can have this (percent-decoded) path, or None. Nothing stored can be named
    so: ids are generated, names are checked. PostgreSQL's text refuses a NUL and an unpaired
    surrogate is not UTF-8 at all (neither reaches Python through uvicorn, which decodes with
    replacement characters, but another ASGI server may pass one); an over-long name would
    overflow a B-tree entry of PostgreSQL's indexes and bloat the audit trail."""
    if "\x00" in path:
        return "no resource has a NUL character in its name"
    if not path.isascii() and _SURROGATE.search(path):
        return "no resource has an unpaired surrogate (not UTF-8) in its name"
    if len(path) > MAX_PATH_SEGMENT and any(len(part) > MAX_PATH_SEGMENT for part in path.split("/")):
        return f"no resource has a name (a path segment) of more than {MAX_PATH_SEGMENT} characters"
    return None


class EdgeGuard:
    """The outermost checks, before authentication reads the database or writes the audit trail:

    - a request whose path names something that cannot exist (:func:`path_refusal`: a NUL, an
      unpaired surrogate, a segment of more than :data:`MAX_PATH_SEGMENT` characters) is a 404
      at once, and one whose query holds a NUL a 400, whoever sends it: such names never reach
      the database, the audit trail included;
    - a database failure raised before the app's own handlers (authentication looks tokens up)
      is a 503 with Retry-After, like the app's, and a value the database refused a 422
      (:func:`database_refused`), not a bare 500; any other failure there is a 500 in the one
      error shape (and logged), not uvicorn's text/plain one.
    """

    def __init__(self, app: ASGIApp) -> None:
        self.app = app

    async def __call__(self, scope: Scope, receive: Receive, send: Send) -> None:
        if scope["type"] != "http":
            await self.app(scope, receive, send)
            return
        refused = path_refusal(scope["path"])
        if refused is not None:
            await error_response(404, "not_found", refused)(scope, receive, send)
            return
        if b"\x00" in unquote_to_bytes(scope.get("query_string", b"")):
            response = error_response(400, "invalid_request", "query parameters must not contain NUL")
            await response(scope, receive, send)
            return
        started = False

        async def tracking_send(message: Any) -> None:
            nonlocal started
            started = started or message["type"] == "http.response.start"
            await send(message)

        try:
            await self.app(scope, receive, tracking_send)
        except Exception as exc:
            known = database_unavailable(exc) or database_refused(exc)
            if started:  # the app's own handler answered and re-raised (Starlette does)
                if known is not None:
                    return
                raise
            if known is None:
                log.exception("unhandled error on %s %s", scope["method"], scope["path"][:300])
                failed = error_response(500, "internal_error", "the server failed to handle this request")
                await failed(scope, receive, send)
                return
            log.warning("%s %s: %s", scope["method"], scope["path"][:300], known.message)
            if known.status == 503:
                await unavailable_response(known)(scope, receive, send)
            else:
                await error_response(known.status, known.code, known.message)(scope, receive, send)


async def _sweep_forever(app: FastAPI, vacuum: QueueVacuum | None) -> None:
    store: GraphStore = app.state.store
    hub: Hub = app.state.hub
    settings: Settings = app.state.settings
    while True:
        if vacuum is not None:  # on PostgreSQL: the run queue's dead rows (store/_pg_vacuum.py)
            vacuum.tick()
        try:
            outcome = await store.sweep()
            for node in outcome.nodes:
                hub.notify(node_key(node))
            for ident in outcome.traversers:
                hub.notify(traverser_key(ident))
        except Exception as exc:  # keep sweeping; one bad pass must not stop expiries for good
            if (down := database_unavailable(exc)) is not None:
                log.warning("sweep skipped: %s", down.message)
            else:
                log.exception("sweep failed")
        await asyncio.sleep(settings.sweep_seconds)


#: The channel on which servers sharing a PostgreSQL database pass on their hubs' notifications.
HUB_CHANNEL = "atfg_hub"


def _bridge_hub(hub: Hub, db: Any, loop: asyncio.AbstractEventLoop) -> None:
    """Wire this server's hub to the others sharing the database: each notification goes out
    with NOTIFY (tagged with this server's id, so its own echo is ignored) and each one from
    another server wakes the waiters here."""
    me = uuid.uuid4().hex

    def forward(key: str) -> None:
        db.notify_later(HUB_CHANNEL, f"{me} {key}")

    def received(payload: str) -> None:
        origin, _, key = payload.partition(" ")
        if origin != me and key:
            with contextlib.suppress(RuntimeError):  # the loop is gone: the server is stopping
                loop.call_soon_threadsafe(hub.wake, key)

    hub.forward = forward
    db.listen(HUB_CHANNEL, received)


#: Seconds a token's stored row is reused to verify requests (see ``Identity``).
TOKEN_CACHE_SECONDS = 2.0
#: Seconds /readyz waits at most for its write probe (less when the write timeout is shorter).
READY_PROBE_SECONDS = 2.0


async def finish_startup(app: FastAPI) -> None:
    """What a server does once it is bound to its port (``_serve`` calls it; /readyz answers
    503 until it has run): on an empty database, mint the owner and worker credentials and write
    them to the data directory (:meth:`Identity.bootstrap`, which never overwrites a credentials
    file). A start that fails earlier (the port is taken, the database cannot be opened) mints
    nothing and writes nothing."""
    settings: Settings = app.state.settings
    written = await app.state.identity.bootstrap(settings.home, settings.external_url, settings.db_path)
    if written is not None:
        print(
            f"atfgraph: first start: owner and worker credentials written to {written} "
            "(readable only by you; clients and workers pick them up from there or $ATFGRAPH_TOKEN)",
            file=sys.stderr,
            flush=True,
        )
        if written.name != CREDENTIALS_FILE:
            print(
                f"atfgraph: {written.parent / CREDENTIALS_FILE} belongs to another database and was "
                f"left alone; clients of this server need ATFGRAPH_TOKEN (the owner token in {written})",
                file=sys.stderr,
                flush=True,
            )
    app.state.serving = True


def create_app(settings: Settings | None = None) -> FastAPI:
    settings = settings or Settings.from_env()

    @contextlib.asynccontextmanager
    async def lifespan(app: FastAPI) -> AsyncIterator[None]:
        app.state.store = GraphStore(
            settings.db_path,
            lease_seconds=settings.lease_seconds,
            synchronous=settings.synchronous,
            write_timeout=settings.write_timeout,
        )
        # A token's row is reused for 2 s (see Identity): a lookup per request is a round trip
        # on PostgreSQL, and on SQLite a read on the event loop that gives up the GIL to the
        # writer thread and waits to get it back (about 0.2 ms of the server's 2.3 ms of CPU
        # per approval cycle under bench.atfgraph_cycles). A revocation through this server
        # takes effect at once; one SQLite file has no other server to revoke through.
        app.state.identity = Identity(app.state.store.db, cache_seconds=TOKEN_CACHE_SECONDS)
        app.state.service = Service(app.state.store, app.state.identity, app.state.hub)
        if app.state.store.is_postgres:
            _bridge_hub(app.state.hub, app.state.store.db, asyncio.get_running_loop())
        # The first pass runs before the server answers anything: approvals that fell due and
        # leases that ran out while it was down are settled first.
        await app.state.store.sweep()
        vacuum = QueueVacuum.of(app.state.store.db)
        sweeper = asyncio.create_task(_sweep_forever(app, vacuum))
        # Announces created waits (and drains the outbox when no endpoint is configured).
        app.state.notifier = Notifier(app.state.store.db, settings.notify, settings.external_url)
        notifier = asyncio.create_task(app.state.notifier.run_forever())
        tasks = [sweeper, notifier]
        if settings.retention is not None or settings.audit_retention is not None:
            tasks.append(
                asyncio.create_task(
                    purge_forever(
                        app.state.store.db,
                        settings.retention,
                        settings.audit_retention,
                        settings.purge_seconds,
                    )
                )
            )
        # The runs and waits of this database, read when /metrics is scraped.
        stop_collecting = metrics.collect_store(app.state.store.db.read, app.state.store)
        let_go_of_gc = hold_gc_pace(settings.gc_threshold)
        try:
            yield
        finally:
            stop_collecting()
            for task in tasks:
                task.cancel()
                with contextlib.suppress(asyncio.CancelledError):
                    await task
            if vacuum is not None:
                vacuum.close()
            let_go_of_gc()
            app.state.store.close()

    app = FastAPI(
        title="atfgraph graph server",
        version="2",
        description="Traversers, approvals, checkpoints and worker leases.",
        lifespan=lifespan,
        openapi_url="/api/v2/openapi.json",
        docs_url=None,  # _explorer serves it, offline
        redoc_url=None,
    )
    install_limits(app, max_path_segment=MAX_PATH_SEGMENT)
    install_explorer(app)
    app.state.settings = settings
    app.state.hub = Hub()
    app.state.serving = False
    app.include_router(router)
    app.include_router(admin_router)
    app.include_router(runs_router)
    app.include_router(links_router)
    install_console(app)

    @app.get("/livez", response_model=Health)
    async def livez() -> Response:
        return Response(b'{"status":"ok"}', media_type="application/json")

    @app.get("/metrics", include_in_schema=False)
    async def metrics_endpoint() -> Response:
        """Prometheus text format; owners and administrators only (see _auth.RULES), or on the
        separate, unauthenticated ``--metrics-bind`` address."""
        body = await asyncio.to_thread(metrics.metrics_text)  # reads the database
        return Response(body, media_type=metrics.CONTENT_TYPE)

    @app.get("/readyz", response_model=Health)
    async def readyz(request: Request) -> Response:
        """Ready when the server finished starting, the database answers a read and commits a
        write (an empty transaction through the writer: a write lock held elsewhere, a file
        deleted or replaced under the server, PostgreSQL down), within READY_PROBE_SECONDS;
        otherwise a 503 ``database_unavailable`` (``starting`` before the first start's work is
        done) in the error shape, with Retry-After."""
        if not request.app.state.serving:
            return unavailable_response(ApiError(503, "starting", "the server is starting"))
        store: GraphStore = request.app.state.store
        store.db.read(lambda conn: conn.execute("SELECT 1 FROM runs LIMIT 1").fetchall())
        await store.db.check_writable(timeout=min(settings.write_timeout, READY_PROBE_SECONDS))
        return Response(b'{"status":"ready"}', media_type="application/json")

    @app.exception_handler(ApiError)
    @app.exception_handler(Refusal)
    async def apierror_response(request: Request, exc: Exception) -> Response:
        assert isinstance(exc, ApiError | Refusal)
        error = api_error(exc)
        return error_response(error.status, error.code, error.message)

    @app.exception_handler(RequestValidationError)
    async def validationerror_response(request: Request, exc: RequestValidationError) -> Response:
        parts = []
        for err in exc.errors():
            where = ".".join(str(p) for p in err.get("loc", ()))
            parts.append(f"{where}: {err.get('msg', 'invalid')}")
        return error_response(422, "validation_error", "; ".join(parts) or "invalid request")

    @app.exception_handler(StarletteHTTPException)
    async def httperror_response(request: Request, exc: StarletteHTTPException) -> Response:
        codes = {404: "not_found", 405: "method_not_allowed"}
        response = error_response(exc.status_code, codes.get(exc.status_code, "http_error"), str(exc.detail))
        response.headers.update(exc.headers or {})
        if exc.status_code == 405:  # Starlette names one route's methods; the path may have more
            methods = allowed_methods(request.app, request.url.path)
            if methods:
                response.headers["Allow"] = ", ".join(methods)
        return response

    @app.exception_handler(Exception)
    async def internalerror_response(request: Request, exc: Exception) -> Response:
        if (down := database_unavailable(exc)) is not None:
            log.warning("%s %s: %s", request.method, request.url.path, down.message)
            return unavailable_response(down)
        if (refused := database_refused(exc)) is not None:
            log.warning("%s %s: %s", request.method, request.url.path[:300], refused.message)
            return error_response(refused.status, refused.code, refused.message)
        log.exception("unhandled error on %s %s", request.method, request.url.path)
        return error_response(500, "internal_error", "the server failed to handle this request")

    return app


def wrap(app: FastAPI) -> Any:
    """The ASGI callable to serve: a trusted proxy's forwarding headers, the HTTP metrics and
    request counter (exposed on app.state) and access log, the span of a request that carries
    ``traceparent``, the edge guard, authentication and authorization, then the hot routes' fast
    path, then the FastAPI app."""
    settings: Settings = app.state.settings
    edge = TraceContext(EdgeGuard(AuthMiddleware(FastPath(app), app)))
    counter = HttpMetrics(edge, access_log=settings.access_log)
    app.state.counter = counter
    return ForwardedHeaders(counter, settings.trusted_proxies)
