"""What a running handler can see: :func:`current_context`, and the internal per-attempt state
(``_Attempt``) that the agent's helpers read and write.

``_TraversalPaused`` and ``_LeaseLost`` stop a handler. They derive from ``BaseException``, like
``asyncio.CancelledError``, so ``except Exception`` in user code cannot swallow them; only the
worker catches them, at the handler boundary.
"""

from __future__ import annotations

import asyncio
import contextvars
import logging
import time
from collections.abc import Awaitable, Callable, Iterator
from dataclasses import dataclass, field
from typing import TYPE_CHECKING, Any

from ._errors import ServerError, ServerUnavailableError

if TYPE_CHECKING:
    from ._transport import Transport

log = logging.getLogger("atfgraph.worker")

#: Delays between the retries of a call the server could not answer (a restart, a 503).
_RETRY_DELAYS = (0.05, 0.1, 0.2, 0.5, 1.0, 2.0)


def backoff(limit: float | None = None) -> Iterator[float]:
    """Delays between retries; with ``limit``, stops once they add up to it."""
    total = 0.0
    index = 0
    while limit is None or total < limit:
        delay = _RETRY_DELAYS[min(index, len(_RETRY_DELAYS) - 1)]
        total += delay
        index += 1
        yield delay


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
class Rides:
    """A worker's reports whose answers may wait for its next task: at most ``limit`` out at
    once. The others free their permit as soon as they are answered, for the worker's own poll
    to claim together (one claim of several tasks, where a report's claim takes one)."""

    limit: int
    out: int = 0


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
    #: to hand out with its answer (the worker's id, one task, how long the answer may wait for
    #: one), None: nothing
    claim_next: dict[str, Any] | None = None
    #: such a report is out: no handler runs in the permit while its answer waits for work
    freeing: bool = False
    #: when that report went out (ns): where the attempt's span ends
    freeing_since: int = 0
    #: the tasks such an answer carried, for the worker to start once this attempt is over
    next_tasks: list[dict[str, Any]] = field(default_factory=list)
    #: calls under the lease waiting for their answer: while one is out, that answer (not a
    #: heartbeat's) says whether the lease is lost, since the call itself may have closed it
    calls_in_flight: int = 0
    #: how long the lease lasts without a heartbeat (the server's answer to the claim)
    lease_seconds: float = 30.0
    #: the worker's count of such reports out (None: no limit)
    rides: Rides | None = None
    #: this attempt's report that asked for the next task is out, counted in ``rides``
    riding: bool = False

    def ask_next(self, body: dict[str, Any]) -> float | None:
        """Ask in ``body``, a report that frees this attempt's permit, for the next task (see
        ``claim_next``); the read timeout its answer needs, which may wait for work (None: the
        transport's own, nothing asked). Nothing is asked while the worker has as many such
        reports out as it allows (``rides``): this one's permit is freed when it is answered."""
        if self.claim_next is None:
            return None
        if self.rides is not None:
            if self.rides.out >= self.rides.limit:
                return None
            self.rides.out += 1
            self.riding = True
        body["claim"] = self.claim_next
        self.freeing, self.freeing_since = True, time.time_ns()
        return float(self.claim_next.get("wait_seconds") or 0.0) + 15.0

    def ended_at(self) -> int | None:
        """When this attempt's work ended, if a report that frees its permit is out (ns)."""
        return self.freeing_since if self.freeing else None

    def next_seq(self) -> int:
        self.seq += 1
        return self.seq

    def take_steps(self) -> list[dict[str, Any]]:
        """The child steps not yet sent; they travel with the next write of this attempt."""
        steps, self.pending_steps = self.pending_steps, []
        return steps

    def lease(self) -> dict[str, Any]:
        """The task lease as a request names it: the epoch and the worker holding it."""
        return {"epoch": self.context.epoch, "worker_id": self.context.worker_id}

    def leased(self, **body: Any) -> dict[str, Any]:
        """A write's body under the lease, with the child steps not yet sent."""
        return {**self.lease(), "steps": self.take_steps(), **body}

    async def call(
        self,
        method: str,
        path: str,
        body: Any = None,
        *,
        params: dict[str, Any] | None = None,
        read_timeout: float | None = None,
        settle: Callable[[ServerError], Awaitable[Any]] | None = None,
    ) -> Any:
        """A request of this attempt, under its lease: every call a handler makes (checkpoints,
        memory, approvals, child steps) and the worker's report of its outcome.

        While the server cannot be reached or cannot reach its database (a restart, a 503) the
        same request is sent again with back-off for as long as a lease lasts: the worker keeps
        heartbeating it, and the server keeps it through its own restart, so a brief outage
        costs the handler a delay, not its attempt. A lost lease stops the handler
        (``_LeaseLost``): the server's ``409 lease_lost`` (it expired, or another attempt has
        taken over), or no answer for a whole lease. ``settle``: after a retry, the request that
        got no answer may have been carried out; a refusal of the retry is handed to ``settle``,
        which may find that write done and answer for it (or raise)."""
        retried = False
        self.calls_in_flight += 1
        try:
            for delay in backoff(limit=self.lease_seconds):
                try:
                    return await self.transport.request(method, path, body, params, read_timeout)
                except ServerError as exc:
                    if exc.code == "lease_lost":
                        raise _LeaseLost(exc.message) from None
                    if retried and settle is not None:
                        return await settle(exc)
                    raise
                except ServerUnavailableError as exc:
                    log.warning("%s %s: %s (retrying under the lease)", method, path, exc)
                    retried = True
                    await asyncio.sleep(delay)
            raise _LeaseLost("the server was unreachable for a whole lease")
        finally:
            self.calls_in_flight -= 1
            if self.riding and self.rides is not None:  # the report that asked is answered
                self.riding = False
                self.rides.out -= 1


_current: contextvars.ContextVar[_Attempt] = contextvars.ContextVar("atfgraph_attempt")


def _attempt() -> _Attempt:
    try:
        return _current.get()
    except LookupError:
        raise RuntimeError("not inside an atfgraph handler (run it through a worker)") from None


def current_context() -> TraversalContext:
    """The context of the handler running in this task."""
    return _attempt().context
