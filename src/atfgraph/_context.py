"""What a running handler can see: :func:`current_context`, and the internal per-attempt state
(``_Attempt``) that the agent's helpers read and write.

``_TraversalPaused`` and ``_LeaseLost`` stop a handler. They derive from ``BaseException``, like
``asyncio.CancelledError``, so ``except Exception`` in user code cannot swallow them; only the
worker catches them, at the handler boundary.
"""

from __future__ import annotations

import contextvars
from dataclasses import dataclass, field
from typing import TYPE_CHECKING, Any

if TYPE_CHECKING:
    from ._transport import Transport


class _TraversalPaused(BaseException):
    """The handler asked for a decision that is still pending; the server closed its lease."""

    def __init__(self, approval: dict[str, Any]) -> None:
        super().__init__(approval.get("id"))
        self.approval = approval


class _LeaseLost(BaseException):
    """The task lease is gone (expired, cancelled or taken over): stop without reporting."""


@dataclass(frozen=True, slots=True)
class TraversalContext:
    """The traverser a handler is running for, and which attempt this is (1 on first run; each
    retry and each continuation after a decision adds one)."""

    traverser_id: str
    target: str
    node_id: str
    version: str
    attempt: int
    max_attempts: int
    epoch: int
    worker_id: str


@dataclass(slots=True)
class _Attempt:
    """One attempt's state: the lease, and a copy of what the claim carried (checkpoints, steps,
    approvals) kept up to date by this attempt's own writes, so reads cost no round trip."""

    context: TraversalContext
    transport: Transport
    checkpoints: dict[str, tuple[Any, int]]
    steps: dict[str, dict[str, Any]]
    approvals: dict[str, dict[str, Any]]
    pending_steps: list[dict[str, Any]] = field(default_factory=list)
    seq: int = 0
    #: what a report that frees this attempt's permit (a pause, the completion) asks the server
    #: to hand out with its answer (the worker's id and one task), None: nothing
    claim_next: dict[str, Any] | None = None
    #: the tasks such an answer carried, for the worker to start once this attempt is over
    next_tasks: list[dict[str, Any]] = field(default_factory=list)
    #: calls under the lease waiting for their answer: while one is out, that answer (not a
    #: heartbeat's) says whether the lease is lost, since the call itself may have closed it
    calls_in_flight: int = 0

    def next_seq(self) -> int:
        self.seq += 1
        return self.seq

    def take_steps(self) -> list[dict[str, Any]]:
        """The child steps not yet sent; they travel with the next write of this attempt."""
        steps, self.pending_steps = self.pending_steps, []
        return steps

    def leased(self, **body: Any) -> dict[str, Any]:
        return {"epoch": self.context.epoch, "steps": self.take_steps(), **body}


_current: contextvars.ContextVar[_Attempt] = contextvars.ContextVar("atfgraph_attempt")


def _attempt() -> _Attempt:
    try:
        return _current.get()
    except LookupError:
        raise RuntimeError("not inside an atfgraph handler (run it through a worker)") from None


def current_context() -> TraversalContext:
    """The context of the handler running in this task."""
    return _attempt().context
