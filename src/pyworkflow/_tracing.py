"""The engine's spans (see :mod:`pyworkflow.store.tracing` for the rules both faces share).

``pyworkflow.start`` (a run recorded) is the root a run keeps: its carrier is stored in the run's
input document (``"trace"``), and every later span of the run takes it as parent, in whichever
process and however long after: ``pyworkflow.turn`` (one turn, or attempt, of the run; linked to
what woke it when a Celery message says), ``pyworkflow.step`` (a step that ran, not one replayed)
under its turn, ``pyworkflow.wait`` (a hook, step hook, sleep or retry back-off, from its
creation to its resolution, emitted by the first turn after it resolved) and
``pyworkflow.decision`` (``resume_hook``; linked to the caller's span). Each place costs one
cached check when tracing is off."""

from __future__ import annotations

from collections.abc import Iterator, Mapping
from contextlib import AbstractContextManager, contextmanager
from contextvars import ContextVar
from typing import Any

from opentelemetry import trace

from . import _serde
from ._errors import SuspensionSignal
from .store import Claim, RunState, Store, WaitRecord
from .store import tracing as _t

TRACER = "pyworkflow"
ATTEMPT = "pyworkflow.attempt"
WORKFLOW = "pyworkflow.workflow"
WAIT_ID = "pyworkflow.wait_id"
WAIT_KIND = "pyworkflow.wait.kind"
WAIT_NAME = "pyworkflow.wait.name"
STEP = "pyworkflow.step"

#: The carrier of what woke this turn (a Celery message's headers), set by the runtime.
waker: ContextVar[Mapping[str, Any] | None] = ContextVar("pyworkflow_waker", default=None)


def started(run_id: str, workflow: str) -> AbstractContextManager[dict[str, str] | None]:
    """Around ``start()``: the span of the run's submission; yields the carrier to store with
    the run (None when tracing is off)."""
    return _started(run_id, workflow) if _t.enabled() else _t.null()


@contextmanager
def _started(run_id: str, workflow: str) -> Iterator[dict[str, str] | None]:
    attrs = {_t.RUN_ID: run_id, WORKFLOW: workflow}
    with _t.span(TRACER, "pyworkflow.start", attrs, kind=trace.SpanKind.PRODUCER):
        yield _t.carrier()


def run_context(input_doc: bytes) -> Any:
    """The trace context a run's input document stores (None: it was started untraced)."""
    info = _serde.loads(input_doc)
    return _t.context_of(info.get("trace") if isinstance(info, dict) else None)


def turn(claim: Claim, state: RunState) -> AbstractContextManager[trace.Span | None]:
    """Around one turn: its span, child of the run's stored context (and the waits that resolved
    since the last turn, as spans of their own)."""
    return _turn(claim, state) if _t.enabled() else _t.null()


@contextmanager
def _turn(claim: Claim, state: RunState) -> Iterator[trace.Span | None]:
    fence = claim.fence
    parent = run_context(claim.input)
    woke = waker.get()
    if parent is None:  # a run started before tracing was on: what woke it is all there is
        parent, links = _t.context_of(woke), []
    else:
        links = _t.link_to(woke)
    _resolved_waits(fence.run_id, state, parent)
    attrs = {_t.RUN_ID: fence.run_id, WORKFLOW: claim.workflow, ATTEMPT: fence.epoch}
    attrs["pyworkflow.resumed"] = claim.resumed
    kind = trace.SpanKind.CONSUMER
    with _t.span(TRACER, "pyworkflow.turn", attrs, parent=parent, links=links, kind=kind) as span:
        yield span


def outcome(span: trace.Span | None, how: str) -> None:
    """Record how a turn ended (suspended, completed, failed, cancelled, lost)."""
    if span is not None:
        span.set_attribute(_t.STATUS, how)
        if how == "failed":
            span.set_status(trace.Status(trace.StatusCode.ERROR, "the run failed"))


def _resolved_waits(run_id: str, state: RunState, parent: Any) -> None:
    """A span per wait this turn continues from: resolved after the newest wait was created (a
    later turn finds a newer wait; a turn that crashed and ran again may emit one twice)."""
    if not state.waits:
        return
    newest = max(w.created_at for w in state.waits.values())
    for w in state.waits.values():
        if w.resolved_at is None or w.resolved_at < newest or w.status.value == "pending":
            continue
        attrs = {
            _t.RUN_ID: run_id,
            WAIT_ID: w.id,
            WAIT_KIND: w.kind.value,
            WAIT_NAME: w.name,
            _t.STATUS: w.status.value,
        }
        span = _t.tracer(TRACER).start_span(
            "pyworkflow.wait", context=parent, attributes=attrs, start_time=_t.nanos(w.created_at)
        )
        span.end(end_time=_t.nanos(w.resolved_at))


def step(run_id: str, key: str, attempt: int) -> AbstractContextManager[trace.Span | None]:
    """Around a step that runs (not one replayed): its span, child of the turn's."""
    if not _t.enabled():
        return _t.null()
    attrs = {_t.RUN_ID: run_id, STEP: key, ATTEMPT: attempt}
    return _step(attrs)


@contextmanager
def _step(attrs: dict[str, Any]) -> Iterator[trace.Span | None]:
    with _t.span(TRACER, "pyworkflow.step", attrs, suspension=SuspensionSignal) as span:
        yield span
        span.set_attribute(_t.STATUS, "completed")


async def decided(store: Store, wait: WaitRecord, began: float) -> AbstractContextManager[Any]:
    """After ``resume_hook`` recorded a decision: its span (from ``began`` to now), child of the
    run's stored context and linked to the caller's span, current while the run is woken (so a
    Celery message carries it). One read of the run, only when tracing is on."""
    if not _t.enabled():
        return _t.null()
    run = await store.get_run(wait.run_id)
    parent = run_context(run.input) if run is not None else None
    caller = trace.get_current_span().get_span_context()
    links = [trace.Link(caller)] if caller.is_valid and parent is not None else []
    attrs = {_t.RUN_ID: wait.run_id, WAIT_ID: wait.id, WAIT_KIND: wait.kind.value, WAIT_NAME: wait.name}
    attrs[_t.STATUS] = wait.status.value
    span = _t.tracer(TRACER).start_span(
        "pyworkflow.decision", context=parent, attributes=attrs, links=links, start_time=_t.nanos(began)
    )
    return _current_until_exit(span)


@contextmanager
def _current_until_exit(span: trace.Span) -> Iterator[trace.Span]:
    with trace.use_span(span, end_on_exit=True):
        yield span
