"""Traces of both faces, on the OpenTelemetry API (the SDK is the optional ``tracing`` extra).

Whether anything is traced is decided once per process, at the first span: tracing is on when a
tracer provider other than the API's default (a proxy that does nothing) or the no-op one is
installed, by the application (``trace.set_tracer_provider(...)``) or by :func:`setup_from_env`,
which every process this project starts calls (the graph server, ``python -m atfgraph.worker``,
``pyworkflow worker`` and ``sweeper``, ``pyworkflow.configure``). With tracing off each
instrumented place costs one call returning a cached ``False``: no span object, no context, no
extra read or statement.

A run's trace context is stored with the run as a W3C carrier (``{"traceparent": ...}``, and
``tracestate`` when there is one): a pyworkflow run's in its input document, a traverser's in
``runs.trace_context``. Every later span of the run (an attempt resumed hours later in another
process, a decision, a wait) takes it as its parent, so the run is one trace however often it
pauses. What woke an attempt (a Celery message's headers, the HTTP request of a decision) is a
span link, not the parent.

Attributes name runs, waits, attempts, targets and statuses; never a token, a link's secret, a
payload or an exception's message (it may quote user data): an error is its type's name.
"""

from __future__ import annotations

import os
from collections.abc import Callable, Iterator, Mapping, Sequence
from contextlib import AbstractContextManager, contextmanager, nullcontext
from importlib.metadata import entry_points
from typing import Any

import orjson
from opentelemetry import trace
from opentelemetry.context import Context
from opentelemetry.trace import Link, Span, SpanKind, Status, StatusCode
from opentelemetry.trace.propagation.tracecontext import TraceContextTextMapPropagator

from .._errors import ConfigurationError

__all__ = [
    "ERROR_TYPE",
    "RUN_ID",
    "STATUS",
    "carrier",
    "context_of",
    "decode_carrier",
    "enabled",
    "encode_carrier",
    "failed",
    "link_to",
    "nanos",
    "null",
    "reset",
    "setup_from_env",
    "span",
    "tracer",
]

#: The attributes both faces use (a traverser is a run: its id is a run id).
RUN_ID = "pyworkflow.run_id"
STATUS = "pyworkflow.status"
ERROR_TYPE = "error.type"

_PROPAGATOR = TraceContextTextMapPropagator()
_on: bool | None = None
_tracers: dict[str, trace.Tracer] = {}
#: The carrier keys kept (W3C Trace Context); anything else a caller sends is dropped.
_KEYS = ("traceparent", "tracestate")
_NULL: AbstractContextManager[None] = nullcontext()


def enabled() -> bool:
    """Whether this process traces (decided at the first call, then cached)."""
    global _on
    if _on is None:
        provider = trace.get_tracer_provider()
        _on = not isinstance(provider, trace.ProxyTracerProvider | trace.NoOpTracerProvider)
    return _on


def reset() -> None:
    """Decide again at the next span (after installing a tracer provider in a running process)."""
    global _on
    _on = None
    _tracers.clear()


def setup_from_env() -> bool:
    """Install the SDK's tracer provider when none is installed and ``OTEL_TRACES_EXPORTER``
    names span exporters (``otlp``, ``console``, any ``opentelemetry_traces_exporter`` entry
    point); the SDK and the exporters then read the rest of their standard variables
    (``OTEL_SERVICE_NAME``, ``OTEL_RESOURCE_ATTRIBUTES``, ``OTEL_EXPORTER_OTLP_ENDPOINT``,
    ``OTEL_TRACES_SAMPLER``, ``OTEL_BSP_*``). Returns :func:`enabled`. Raises
    ``ConfigurationError`` naming the extra to install when an exporter is asked for and the SDK
    or that exporter is not installed."""
    names = [n.strip() for n in os.environ.get("OTEL_TRACES_EXPORTER", "").split(",") if n.strip()]
    names = [n for n in names if n != "none"]
    if not names or not isinstance(trace.get_tracer_provider(), trace.ProxyTracerProvider):
        return enabled()
    try:
        from opentelemetry.sdk.resources import Resource
        from opentelemetry.sdk.trace import TracerProvider
        from opentelemetry.sdk.trace.export import BatchSpanProcessor
    except ImportError as exc:
        raise ConfigurationError(
            "OTEL_TRACES_EXPORTER is set but the OpenTelemetry SDK is not installed: "
            "pip install 'pyworkflow-atfgraph[tracing]'"
        ) from exc
    provider = TracerProvider(resource=Resource.create())
    for name in names:
        found = list(entry_points(group="opentelemetry_traces_exporter", name=_exporter_name(name)))
        if not found:
            raise ConfigurationError(
                f"no span exporter {name!r} is installed (OTEL_TRACES_EXPORTER); "
                "for OTLP: pip install 'pyworkflow-atfgraph[tracing]'"
            )
        provider.add_span_processor(BatchSpanProcessor(found[0].load()()))
    trace.set_tracer_provider(provider)
    reset()
    return enabled()


def _exporter_name(name: str) -> str:
    """``otlp`` means OTLP over the protocol ``OTEL_EXPORTER_OTLP_PROTOCOL`` names (the SDK's
    default is grpc; the ``tracing`` extra installs the http/protobuf exporter)."""
    if name != "otlp":
        return name
    protocol = os.environ.get("OTEL_EXPORTER_OTLP_TRACES_PROTOCOL") or os.environ.get(
        "OTEL_EXPORTER_OTLP_PROTOCOL", "http/protobuf"
    )
    return "otlp_proto_grpc" if protocol == "grpc" else "otlp_proto_http"


def tracer(name: str) -> trace.Tracer:
    found = _tracers.get(name)
    if found is None:
        found = _tracers[name] = trace.get_tracer(name)
    return found


def carrier(ctx: Context | None = None) -> dict[str, str]:
    """The W3C carrier of ``ctx`` (default: the current context); empty when it has no span."""
    out: dict[str, str] = {}
    _PROPAGATOR.inject(out, context=ctx)
    return out


def context_of(found: Mapping[str, Any] | None) -> Context | None:
    """The context a stored or received carrier names; None when it names none (or is not one)."""
    if not found or not isinstance(found.get("traceparent"), str):
        return None
    ctx = _PROPAGATOR.extract({k: found[k] for k in _KEYS if isinstance(found.get(k), str)})
    return ctx if trace.get_current_span(ctx).get_span_context().is_valid else None


def link_to(found: Mapping[str, Any] | None) -> list[Link]:
    """A link to the span a carrier names (what woke an attempt), or none."""
    ctx = context_of(found)
    return [] if ctx is None else [Link(trace.get_current_span(ctx).get_span_context())]


def encode_carrier(found: Mapping[str, str]) -> str | None:
    """A carrier as stored in a text column (JSON), None when it is empty."""
    kept = {k: found[k] for k in _KEYS if found.get(k)}
    return orjson.dumps(kept).decode() if kept else None


def decode_carrier(text: str | None) -> dict[str, str]:
    """A stored carrier; empty when there is none or it is not one."""
    if not text:
        return {}
    try:
        found = orjson.loads(text)
    except orjson.JSONDecodeError:
        return {}
    return {k: found[k] for k in _KEYS if isinstance(found, dict) and isinstance(found.get(k), str)}


@contextmanager
def span(
    tracer_name: str,
    name: str,
    attributes: Mapping[str, Any],
    *,
    parent: Context | None = None,
    links: Sequence[Link] = (),
    kind: SpanKind = SpanKind.INTERNAL,
    suspension: type[BaseException] | None = None,
    ended_at: Callable[[], int | None] | None = None,
) -> Iterator[Span]:
    """A current span that records how its block ended: ``status`` ``suspended`` for
    ``suspension`` (``retrying`` when an error caused it), else the error's type (never its
    message) with an error status. ``ended_at``: asked when the block is over, the time (ns)
    the span's work ended if that was before (None: now)."""
    with tracer(tracer_name).start_as_current_span(
        name,
        context=parent,
        kind=kind,
        attributes=dict(attributes),
        links=list(links),
        record_exception=False,
        set_status_on_exception=False,
        end_on_exit=ended_at is None,
    ) as current:
        try:
            yield current
        except BaseException as exc:
            if suspension is not None and isinstance(exc, suspension):
                # A suspension an error caused is a retry's back-off: the error is the outcome.
                cause = exc.__cause__
                current.set_attribute(STATUS, "suspended" if cause is None else "retrying")
                if cause is not None:
                    current.set_attribute(ERROR_TYPE, type(cause).__name__)
            else:
                failed(current, exc)
            raise
        finally:
            if ended_at is not None:
                current.end(end_time=ended_at())


def failed(current: Span, exc: BaseException) -> None:
    current.set_attribute(STATUS, "failed")
    current.set_attribute(ERROR_TYPE, type(exc).__name__)
    current.set_status(Status(StatusCode.ERROR, type(exc).__name__))


def null() -> AbstractContextManager[None]:
    """The context manager of an instrumented place when tracing is off."""
    return _NULL


def nanos(seconds: float) -> int:
    """An epoch time in seconds (the store's) as the nanoseconds a span's times are."""
    return int(seconds * 1e9)
