"""The graph server's spans (the rules both faces share: :mod:`pyworkflow.store.tracing`).

- ``traceparent`` (W3C Trace Context) on any request: the request gets a server span
  ``HTTP <method> <route template>``, child of the caller's, and what the request does (a
  submission, a decision) is under it. A request without one gets no HTTP span (workers' long
  polls and heartbeats would be a trace each).
- ``atfgraph.submit``: a traverser queued; its carrier is stored with the run
  (``runs.trace_context``) and every claim of the run carries it (``"trace"`` in the task), so
  the worker's ``atfgraph.attempt`` spans are its children, however long after and on whichever
  worker.
- ``atfgraph.decision``: an approval decided, child of the run's stored context, linked to the
  request's span; ``atfgraph.approval``: the approval from its creation to its decision.

With tracing off, each place is one cached check: no span, no stored carrier, no extra read.
"""

from __future__ import annotations

from collections.abc import Callable, Iterator, Sequence
from contextlib import AbstractContextManager, contextmanager
from typing import Any

from opentelemetry import trace
from starlette.types import ASGIApp, Message, Receive, Scope, Send

from pyworkflow.store import tracing as _t

from ._observe import route_label

TRACER = "atfgraph"
TARGET = "atfgraph.target"
APPROVAL_ID = "pyworkflow.wait_id"
OPERATION_KEY = "atfgraph.operation_key"

enabled = _t.enabled

#: Its stored carriers, by traverser id, for the claimed tasks: primary key lookups.
SQL_TRACE_CONTEXTS = "SELECT id, trace_context FROM runs WHERE id IN ({ids}) AND trace_context IS NOT NULL"


class TraceContext:
    """ASGI, outside the authentication (a refused request is traced too): a server span for a
    request that carries ``traceparent``."""

    def __init__(self, app: ASGIApp) -> None:
        self.app = app

    async def __call__(self, scope: Scope, receive: Receive, send: Send) -> None:
        if scope["type"] != "http" or not _t.enabled():
            await self.app(scope, receive, send)
            return
        found = {}
        for name, value in scope.get("headers", ()):
            if name in (b"traceparent", b"tracestate"):
                found[name.decode()] = value.decode("latin-1")
        parent = _t.context_of(found)
        if parent is None:
            await self.app(scope, receive, send)
            return
        method = scope["method"]
        attrs = {"http.request.method": method}
        with _t.tracer(TRACER).start_as_current_span(
            f"HTTP {method}", context=parent, kind=trace.SpanKind.SERVER, attributes=attrs,
            record_exception=False, set_status_on_exception=False,
        ) as span:  # fmt: skip

            async def traced_send(message: Message) -> None:
                if message["type"] == "http.response.start":
                    span.set_attribute("http.response.status_code", message["status"])
                    if message["status"] >= 500:
                        span.set_status(trace.Status(trace.StatusCode.ERROR))
                await send(message)

            try:
                await self.app(scope, receive, traced_send)
            finally:
                route = route_label(scope)
                span.set_attribute("http.route", route)
                span.update_name(f"HTTP {method} {route}")


def submitting(target: str) -> AbstractContextManager[Any]:
    """Around a submission: its span; yields a setter ``(traverser id) -> None`` and the
    carrier to store (None when tracing is off)."""
    return _submitting(target) if _t.enabled() else _t.null()


@contextmanager
def _submitting(target: str) -> Iterator[tuple[Callable[[str], None], str | None]]:
    with _t.span(TRACER, "atfgraph.submit", {TARGET: target}, kind=trace.SpanKind.PRODUCER) as span:
        yield (lambda ident: span.set_attribute(_t.RUN_ID, ident)), _t.encode_carrier(_t.carrier())


def stored_contexts(read: Callable[[str, Sequence[Any]], list[Any]], ids: Sequence[str]) -> dict[str, str]:
    """The stored carriers of ``ids`` (one indexed read), by id."""
    if not ids:
        return {}
    return dict(read(SQL_TRACE_CONTEXTS.format(ids=", ".join("?" * len(ids))), list(ids)))


def add_to_tasks(tasks: list[dict[str, Any]], found: dict[str, str]) -> None:
    """A claimed task carries its run's trace context (``"trace"``: the W3C carrier)."""
    for task in tasks:
        carrier = _t.decode_carrier(found.get(task["traverser"]["id"]))
        if carrier:
            task["trace"] = carrier


def decided(approval: dict[str, Any], stored: str | None, began: float) -> None:
    """The spans of a decision just recorded: the approval's wait (created -> decided) and the
    decision itself (``began`` -> now), children of the run's stored context; the decision is
    linked to the request's span."""
    parent = _t.context_of(_t.decode_carrier(stored))
    caller = trace.get_current_span().get_span_context()
    links = [trace.Link(caller)] if caller.is_valid and parent is not None else []
    attrs = {
        _t.RUN_ID: approval["traverser_id"],
        APPROVAL_ID: approval["id"],
        OPERATION_KEY: approval["operation_key"],
        _t.STATUS: approval["status"],
    }
    tracer = _t.tracer(TRACER)
    decided_at = approval.get("decided_at")
    if decided_at is not None:
        wait = tracer.start_span(
            "atfgraph.approval", context=parent, attributes=attrs, start_time=_t.nanos(approval["created_at"])
        )
        wait.end(end_time=_t.nanos(decided_at))
    span = tracer.start_span(
        "atfgraph.decision", context=parent, attributes=attrs, links=links, start_time=_t.nanos(began)
    )
    span.end()
