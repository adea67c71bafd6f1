"""The worker's spans (the rules both faces share: :mod:`pyworkflow.store.tracing`).

``atfgraph.attempt``: one attempt of a traverser, child of the run's stored context that the claim
carried (``"trace"`` in the task), so a run paused for hours and claimed by another worker stays
one trace; under it ``atfgraph.step`` (a child step that ran, not one replayed) and
``atfgraph.approval.request`` (an approval asked for; ``suspended`` when the handler paused on
it). One cached check per place when tracing is off."""

from __future__ import annotations

from collections.abc import Callable, Iterator
from contextlib import AbstractContextManager, contextmanager
from typing import Any

from opentelemetry import trace

from pyworkflow.store import tracing as _t

from ._context import _TraversalPaused

TRACER = "atfgraph"
TARGET = "atfgraph.target"
ATTEMPT = "pyworkflow.attempt"
EPOCH = "atfgraph.epoch"
STEP = "atfgraph.step"
OPERATION_KEY = "atfgraph.operation_key"


def attempt(task: dict[str, Any], ended_at: Callable[[], int | None]) -> AbstractContextManager[Any]:
    """Around one attempt of a claimed task. ``ended_at``: when its last report went out (ns), if
    it did: the span ends then, not when that report's answer came (which may wait for the
    worker's next task)."""
    return _attempt(task, ended_at) if _t.enabled() else _t.null()


@contextmanager
def _attempt(task: dict[str, Any], ended_at: Callable[[], int | None]) -> Iterator[Any]:
    trav = task["traverser"]
    attrs = {_t.RUN_ID: trav["id"], TARGET: trav["target"], ATTEMPT: trav["attempt"], EPOCH: task["epoch"]}
    parent = _t.context_of(task.get("trace"))
    kind = trace.SpanKind.CONSUMER
    with _t.span(
        TRACER,
        "atfgraph.attempt",
        attrs,
        parent=parent,
        kind=kind,
        suspension=_TraversalPaused,
        ended_at=ended_at,
    ) as span:
        yield span


def mark(status: str) -> None:
    """How the current attempt ended (succeeded, paused, failed, retrying, lost, released)."""
    if _t.enabled():
        trace.get_current_span().set_attribute(_t.STATUS, status)


def step(traverser_id: str, key: str, target: str) -> AbstractContextManager[Any]:
    """Around a child step that runs."""
    if not _t.enabled():
        return _t.null()
    attrs = {_t.RUN_ID: traverser_id, STEP: key, TARGET: target}
    return _with_status("atfgraph.step", attrs)


def approval_request(traverser_id: str, operation_key: str) -> AbstractContextManager[Any]:
    """Around asking the server for an approval."""
    if not _t.enabled():
        return _t.null()
    return _with_status("atfgraph.approval.request", {_t.RUN_ID: traverser_id, OPERATION_KEY: operation_key})


@contextmanager
def _with_status(name: str, attrs: dict[str, Any]) -> Iterator[Any]:
    with _t.span(TRACER, name, attrs, suspension=_TraversalPaused) as span:
        yield span
        span.set_attribute(_t.STATUS, "succeeded")
