"""What the graph server measures and logs, beside the code it observes: the HTTP edge (request
durations by route template, the access log) and the graph store's transitions (one INFO record
each, with ``run_id`` / ``wait_id`` / ``attempt`` as structured fields, and the engine's event
metrics of :mod:`pyworkflow.store.metrics`, written once for both faces)."""

from __future__ import annotations

import logging
import time
from collections.abc import Iterable
from typing import Any

from starlette.types import ASGIApp, Message, Receive, Scope, Send

from pyworkflow.store import metrics

log = logging.getLogger("atfgraph.server")
access = logging.getLogger("atfgraph.access")

#: A traverser's claims whose end has not been seen yet, at most (the oldest are dropped).
_MAX_OPEN_ATTEMPTS = 100_000

# The approval statuses of the API, as the engine's wait statuses.
_WAIT_STATUS = {"approved": "received", "rejected": "received", "expired": "expired"}


def route_label(scope: Scope) -> str:
    """The route template of a request, never its raw path (bounded label values): the API's
    permission rule it matched (``/api/v2/approvals/{id}/decide``), else the FastAPI route or
    mount (``/console/inbox``), else ``unmatched``."""
    template = scope.get("route_template")
    if template is not None:
        return str(template)
    route = scope.get("route")
    path = getattr(route, "path", None)
    return path if isinstance(path, str) else "unmatched"


#: The methods counted by name; any other a client sends is counted as ``other``, so that the
#: label's values stay bounded whatever clients send (a metric keeps every series it saw).
HTTP_METHODS = frozenset({"GET", "HEAD", "POST", "PUT", "PATCH", "DELETE", "OPTIONS"})


def method_label(scope: Scope) -> str:
    """The request's method as a label value: one of :data:`HTTP_METHODS`, else ``other``."""
    method = scope["method"]
    return method if method in HTTP_METHODS else "other"


class HttpMetrics:
    """ASGI, outermost: count every request once it is answered (``requests``: the benchmark
    reports requests per cycle from it), observe its duration by method, route template and
    status, and, with ``access_log``, write one INFO record per request to the
    ``atfgraph.access`` logger. The count moves where the duration is observed, at the end: a
    long poll open across an interval is in both or in neither, so over any interval the count
    equals the sum of the duration histogram's counts."""

    def __init__(self, app: ASGIApp, *, access_log: bool = False) -> None:
        self.app = app
        self.requests = 0
        self.access_log = access_log

    async def __call__(self, scope: Scope, receive: Receive, send: Send) -> None:
        if scope["type"] != "http":
            await self.app(scope, receive, send)
            return
        started = time.perf_counter()
        status = 500  # what the client sees if the app fails before it answers

        async def timed_send(message: Message) -> None:
            nonlocal status
            if message["type"] == "http.response.start":
                status = message["status"]
            await send(message)

        try:
            await self.app(scope, receive, timed_send)
        finally:
            seconds = time.perf_counter() - started
            route = route_label(scope)
            self.requests += 1
            metrics.labelled(metrics.HTTP_SECONDS, method_label(scope), route, str(status)).observe(seconds)
            if self.access_log:
                access.info(
                    "%s %s %d",
                    scope["method"],
                    route,
                    status,
                    extra={
                        "method": scope["method"],
                        "route": route,
                        "path": scope["path"][:300],
                        "status": status,
                        # the caller's address (a trusted proxy's client: _proxy.ForwardedHeaders)
                        "client": scope["client"][0] if scope.get("client") else None,
                        "duration_ms": round(seconds * 1000, 3),
                    },
                )


class AttemptClock:
    """When each traverser attempt this server leased started, until its end is reported here
    (another server sharing the database may see the end instead: that attempt is not timed)."""

    def __init__(self) -> None:
        self._started: dict[tuple[str, int], float] = {}

    def claimed(self, tasks: Iterable[dict[str, Any]], now: float) -> None:
        """Tasks just leased: log each, observe what each continues from, start its clock."""
        for task in tasks:
            trav = task["traverser"]
            ident, epoch = trav["id"], task["epoch"]
            metrics.observe_continuation(
                (
                    ("approval", _WAIT_STATUS.get(a["status"], a["status"]), a["created_at"],
                     a["expires_at"], a["decided_at"])
                    for a in task["approvals"]
                ),
                now,
            )  # fmt: skip
            if len(self._started) >= _MAX_OPEN_ATTEMPTS:
                self._started.pop(next(iter(self._started)))
            self._started[(ident, epoch)] = time.monotonic()
            log.info(
                "traverser %s: running (attempt %d)",
                ident,
                trav["attempt"],
                extra={"run_id": ident, "attempt": trav["attempt"], "epoch": epoch},
            )

    def ended(self, traverser_id: str, epoch: int, outcome: str) -> None:
        """An attempt ended: ``succeeded``, ``failed``, ``retrying`` (queued again) or
        ``released`` (given back unfinished)."""
        started = self._started.pop((traverser_id, epoch), None)
        if started is not None:
            metrics.labelled(metrics.ATTEMPT_SECONDS, "traverser", outcome).observe(
                time.monotonic() - started
            )
        if outcome == "retrying":
            metrics.labelled(metrics.RETRIES, "traverser").inc()
        log.info(
            "traverser %s: attempt %s", traverser_id, outcome, extra={"run_id": traverser_id, "epoch": epoch}
        )


def reaped(traverser_ids: Iterable[str]) -> None:
    """The reaper took back leases that ran out."""
    count = 0
    for ident in traverser_ids:
        count += 1
        log.info("traverser %s: lease expired", ident, extra={"run_id": ident})
    if count:
        metrics.labelled(metrics.LEASE_EXPIRIES, "traverser").inc(count)


__all__ = ["HTTP_METHODS", "AttemptClock", "HttpMetrics", "method_label", "reaped", "route_label"]
