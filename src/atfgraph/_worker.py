"""A worker process: registers an agent's (node id, version), claims tasks by long poll, runs at
most ``capacity`` handlers at once and reports each attempt's outcome under its fenced lease.

Round trips per task: one claim (which carries the task's checkpoints, recorded steps and
approvals, so the handler's reads are local), one call per write the handler makes (child steps
ride along with the next write), and one to report the outcome. The report that frees a permit
(the completion, or the approval request that pauses) asks for the next task in its answer, and
that answer may wait for one (``report_wait_seconds``: a long poll riding on the report, after
the report has committed), so a worker claims nothing on its own between tasks; it long-polls
separately only when that answer brought none. One such report at a time (``MAX_RIDES``): while
one waits, the others free their permits when answered and the worker's own poll claims for
them together. Heartbeats extend all of a worker's leases in
one request every lease/3 seconds.

A handler that pauses ends with ``_TraversalPaused`` after the server has closed its lease: the
worker just frees the permit. Nothing of a waiting traverser stays in the worker.
"""

from __future__ import annotations

import asyncio
import contextlib
import logging
import traceback
from dataclasses import asdict, dataclass
from typing import Any

from . import _tracing as tracing
from ._agent import Agent
from ._context import Rides, TraversalContext, _Attempt, _current, _LeaseLost, _TraversalPaused
from ._context import backoff as _backoff
from ._errors import HandlerError, NotFoundError, SerializationError, ServerError, ServerUnavailableError
from ._json import dumps
from ._transport import Transport, q

log = logging.getLogger("atfgraph.worker")

#: The default of ``Worker.report_wait_seconds``: work that comes within a second of a report is
#: handed out in its answer; an idle worker then long-polls with one claim of its own.
REPORT_WAIT_SECONDS = 1.0
#: How many of a worker's reports may wait for its next task at once. One: with many cycles in
#: flight the other reports free their permits when answered, and the worker's own poll claims
#: for all of them together (at 24 in flight on PostgreSQL, a claim riding on every report cost
#: 1.24x the database's CPU per cycle and twice the resume p50); one cycle at a time, that one
#: report still brings the next task, the server handing work to a report before a poll.
MAX_RIDES = 1


@dataclass(slots=True)
class WorkerStats:
    """Counters a worker reports with its heartbeats."""

    claimed: int = 0
    succeeded: int = 0
    failed: int = 0
    retried: int = 0
    paused: int = 0
    released: int = 0
    lost: int = 0
    permits_in_use: int = 0


@dataclass(slots=True)
class _Running:
    traverser_id: str
    epoch: int
    task: asyncio.Task[None]
    lost: bool = False
    attempt: _Attempt | None = None


class Worker:
    """Serve ``agent`` against the graph server until :meth:`stop` is called."""

    def __init__(
        self,
        agent: Agent,
        server_url: str | None = None,
        *,
        capacity: int | None = None,
        claim_wait_seconds: float = 20.0,
        grace_seconds: float = 10.0,
        token: str | None = None,
        report_wait_seconds: float | None = None,
    ) -> None:
        self.agent = agent
        self.capacity = capacity or agent.capacity
        # $ATFGRAPH_TOKEN, else the worker credential a local server wrote on its first start.
        self.transport = Transport(server_url, timeout=30.0, token=token, kind="worker")
        self.claim_wait_seconds = claim_wait_seconds
        self.grace_seconds = grace_seconds
        #: How long the answer to a report that frees a permit may wait for the next task (a
        #: long poll riding on the report; after it the worker claims on its own). Short: until
        #: that answer comes the worker does not know how its report went, and a stopping
        #: worker waits for it (at most half the grace).
        if report_wait_seconds is None:
            report_wait_seconds = min(REPORT_WAIT_SECONDS, claim_wait_seconds, grace_seconds / 2)
        self.report_wait_seconds = report_wait_seconds
        self.stats = WorkerStats()
        self.worker_id: str | None = None
        self.lease_seconds = 30.0
        #: the attempts whose coroutines run, by traverser id and epoch: a traverser's next
        #: attempt may start (from another poll's answer) while its previous attempt's report
        #: still waits for its answer, and each holds its own permit until its coroutine ends
        self._running: dict[tuple[str, int], _Running] = {}
        self._stopping = asyncio.Event()
        self._slot_freed = asyncio.Event()
        self._rides = Rides(MAX_RIDES)
        self._releasing = False

    @property
    def permits_in_use(self) -> int:
        """Permits a handler runs in: not one whose report is out and only waits for the next
        task (the claim loop still counts it taken, for the task that answer may bring)."""
        return sum(1 for r in self._running.values() if r.attempt is None or not r.attempt.freeing)

    def stop(self) -> None:
        """Stop claiming; running handlers get ``grace_seconds`` to finish, then are released."""
        self._stopping.set()
        for running in self._running.values():  # their reports ask for no next task
            if running.attempt is not None:
                running.attempt.claim_next = None

    # -- main loop -----------------------------------------------------------------------------

    async def run(self) -> None:
        await self._register()
        heartbeats = asyncio.create_task(self._heartbeat_forever())
        try:
            await self._claim_forever()
            await self._drain()
            await self._release_leftovers()
            await self._heartbeat_once()  # the final counters, for operators and tests
        finally:
            heartbeats.cancel()
            with contextlib.suppress(asyncio.CancelledError):
                await heartbeats
            await self.transport.aclose()

    async def _register(self) -> None:
        body = {"node_id": self.agent.node_id, "version": self.agent.version, "capacity": self.capacity}
        for delay in _backoff():
            try:
                answer = await self.transport.request("POST", "/workers", body)
                self.worker_id = answer["id"]
                self.lease_seconds = float(answer["lease_seconds"])
                log.info("registered %s@%s as %s", self.agent.node_id, self.agent.version, self.worker_id)
                return
            except (ServerUnavailableError, ServerError) as exc:
                log.warning("cannot register with %s: %s", self.transport.base_url, exc)
                await _first(asyncio.sleep(delay), self._stopping.wait())
                if self._stopping.is_set():
                    return

    async def _claim_forever(self) -> None:
        delays = _backoff()
        while not self._stopping.is_set():
            free = self.capacity - len(self._running)
            if free <= 0:
                self._slot_freed.clear()
                await _first(self._slot_freed.wait(), self._stopping.wait())
                continue
            claim = asyncio.create_task(self._claim(free))
            await _first(asyncio.shield(claim), self._stopping.wait())
            if not claim.done():
                claim.cancel()  # stopping: the server keeps anything it had not yet handed out
                with contextlib.suppress(BaseException):
                    await claim
                break
            try:
                tasks = claim.result()
            except NotFoundError:  # the server lost our registration (a fresh database)
                await self._register()
                continue
            except (ServerUnavailableError, ServerError) as exc:
                log.warning("claim failed: %s", exc)
                await asyncio.sleep(next(delays))
                continue
            delays = _backoff()
            for task in tasks:
                self._start(task)

    async def _claim(self, free: int) -> list[dict[str, Any]]:
        answer = await self.transport.request(
            "POST",
            f"/workers/{q(self.worker_id)}/claim",
            {"max": free, "wait_seconds": self.claim_wait_seconds},
            read_timeout=self.claim_wait_seconds + 15,
        )
        self.lease_seconds = float(answer["lease_seconds"])
        tasks: list[dict[str, Any]] = answer["tasks"]
        return tasks

    def _start(self, task: dict[str, Any]) -> None:
        trav = task["traverser"]
        self.stats.claimed += 1
        handle = asyncio.create_task(self._execute(task), name=f"atfgraph:{trav['target']}:{trav['id']}")
        self._running[trav["id"], task["epoch"]] = _Running(trav["id"], task["epoch"], handle)
        self.stats.permits_in_use = self.permits_in_use

    async def _drain(self) -> None:
        if not self._running:
            return
        tasks = [r.task for r in self._running.values()]
        _done, pending = await asyncio.wait(tasks, timeout=self.grace_seconds)
        if pending:
            self._releasing = True
            for task in pending:
                task.cancel()
            await asyncio.wait(pending)

    async def _release_leftovers(self) -> None:
        """Every handler has finished or been released: any lease still held in our name came in
        a claim answer we stopped before reading. Give those back rather than let them expire."""
        if self.worker_id is None:
            return
        try:
            await self.transport.request("POST", f"/workers/{q(self.worker_id)}/release", {})
        except (ServerUnavailableError, ServerError) as exc:
            log.warning("could not release leftover leases: %s", exc)

    # -- heartbeats ----------------------------------------------------------------------------

    async def _heartbeat_forever(self) -> None:
        while True:
            await asyncio.sleep(max(self.lease_seconds / 3, 0.1))
            await self._heartbeat_once()

    async def _heartbeat_once(self) -> None:
        if self.worker_id is None:  # stopped before it ever registered
            return
        # A traverser's newest attempt only: an older one's lease was closed by the report it
        # waits on (the newer claim proves it), and the answer names lost leases by id.
        sent = {ident: r.epoch for ident, r in self._newest().items()}
        leases = [{"id": ident, "epoch": epoch} for ident, epoch in sent.items()]
        self.stats.permits_in_use = self.permits_in_use
        body = {"leases": leases, "stats": asdict(self.stats)}
        try:
            answer = await self.transport.request("POST", f"/workers/{q(self.worker_id)}/heartbeat", body)
        except (ServerUnavailableError, ServerError) as exc:
            log.warning("heartbeat failed: %s", exc)
            return
        newest = self._newest()
        for ident in answer["lost"]:
            running = newest.get(ident)
            # Only the attempt the heartbeat spoke for: by the time it answers, the same
            # traverser may be running again here under a newer lease (its continuation).
            if running is None or running.epoch != sent.get(ident):
                continue
            if running.attempt is not None and running.attempt.calls_in_flight:
                continue  # that call's answer tells (it may be the pause or report that closed it)
            running.lost = True
            running.task.cancel()

    def _newest(self) -> dict[str, _Running]:
        """Each traverser's newest attempt in the book."""
        newest: dict[str, _Running] = {}
        for running in self._running.values():
            known = newest.get(running.traverser_id)
            if known is None or running.epoch > known.epoch:
                newest[running.traverser_id] = running
        return newest

    # -- one attempt ---------------------------------------------------------------------------

    async def _execute(self, task: dict[str, Any]) -> None:
        trav = task["traverser"]
        ident, epoch = trav["id"], task["epoch"]
        attempt = _Attempt(
            context=TraversalContext(
                traverser_id=ident,
                target=trav["target"],
                node_id=self.agent.node_id,
                version=self.agent.version,
                attempt=trav["attempt"],
                max_attempts=trav["max_attempts"],
                epoch=epoch,
                worker_id=self.worker_id or "",
            ),
            transport=self.transport,
            checkpoints={name: (c["value"], c["revision"]) for name, c in task["checkpoints"].items()},
            steps={s["key"]: s for s in task["steps"]},
            approvals={a["operation_key"]: a for a in task["approvals"]},
            claim_next=None
            if self._stopping.is_set()
            else {"worker_id": self.worker_id, "max": 1, "wait_seconds": self.report_wait_seconds},
            lease_seconds=self.lease_seconds,
            rides=self._rides,
        )
        running = self._running.get((ident, epoch))
        if running is not None:
            running.attempt = attempt
        token = _current.set(attempt)
        try:
            with tracing.attempt(task, attempt.ended_at):
                await self._attempt(attempt, trav)
        except (ServerError, ServerUnavailableError, _LeaseLost) as exc:
            # The outcome could not be reported; the lease will expire and the server retries.
            log.warning("could not report %s: %s", ident, exc)
        finally:
            _current.reset(token)
            self._running.pop((ident, epoch), None)
            # The permit this attempt held goes to the task its last report brought, if any
            # (once stopping, such a lease is given back with the rest: _release_leftovers).
            if not self._stopping.is_set():
                for following in attempt.next_tasks:
                    self._start(following)
            self.stats.permits_in_use = self.permits_in_use
            self._slot_freed.set()

    async def _attempt(self, attempt: _Attempt, trav: dict[str, Any]) -> None:
        ident = trav["id"]
        path = f"/traversers/{q(ident)}"
        skill = self.agent.skills.get(trav["target"].partition(".")[2])
        try:
            if skill is None:
                raise HandlerError(
                    f"{self.agent.node_id} has no skill for {trav['target']}", code="unknown_skill"
                )
            kwargs = trav["input"] or {}
            skill.bind(kwargs)
            async with asyncio.timeout(skill.timeout_seconds):
                result = await skill.fn(**kwargs)
            body = attempt.leased(result=_jsonable(result))
            answer = await self._report(attempt, path + "/complete", body, attempt.ask_next(body))
            attempt.next_tasks = answer.get("tasks") or []
            self.stats.succeeded += 1
            tracing.mark("succeeded")
        except _TraversalPaused:
            self.stats.paused += 1  # the server closed the lease with the pause
            tracing.mark("suspended")
        except _LeaseLost:
            self.stats.lost += 1
            tracing.mark("lost")
        except HandlerError as exc:
            await self._fail(attempt, path, exc.code, exc.message, retryable=False)
        except TimeoutError:
            limit = skill.timeout_seconds if skill is not None else None
            message = f"attempt {attempt.context.attempt} exceeded timeout_seconds={limit}"
            await self._fail(attempt, path, "timeout", message, retryable=True)
        except asyncio.CancelledError:
            running = self._running.get((ident, attempt.context.epoch))
            if running is not None and running.lost:
                self.stats.lost += 1
            elif self._releasing:
                with contextlib.suppress(_LeaseLost, ServerUnavailableError, ServerError):
                    await self._report(attempt, path + "/release", attempt.leased())
                    self.stats.released += 1
            else:
                raise
        except Exception as exc:
            log.warning("handler %s failed:\n%s", trav["target"], traceback.format_exc())
            await self._fail(attempt, path, type(exc).__name__, str(exc) or repr(exc), retryable=True)

    async def _fail(self, attempt: _Attempt, path: str, code: str, message: str, retryable: bool) -> None:
        body = attempt.leased(error={"code": code, "message": message[:10_000]}, retryable=retryable)
        try:
            answer = await self._report(attempt, path + "/fail", body)
        except _LeaseLost:
            self.stats.lost += 1
            return
        if answer is not None and answer["status"] == "queued":
            self.stats.retried += 1
            tracing.mark("retrying")
        else:
            self.stats.failed += 1
            tracing.mark("failed")

    @staticmethod
    async def _report(
        attempt: _Attempt, path: str, body: dict[str, Any], read_timeout: float | None = None
    ) -> Any:
        """Report under the lease, retrying while the server is unreachable (``_Attempt.call``);
        a lease lost in the meantime means another attempt has taken over, so the outcome is
        dropped (``_LeaseLost``). ``read_timeout``: for an answer that may wait for the next task."""
        return await attempt.call("POST", path, body, read_timeout=read_timeout)


def _jsonable(result: Any) -> Any:
    try:
        dumps(result, what="the handler's result")
    except SerializationError as exc:
        raise HandlerError(str(exc), code="result_not_json") from None
    return result


async def _first(*aws: Any) -> None:
    """Wait until the first of ``aws`` finishes; cancel the others. An outcome is the caller's
    to read from what it passed (the claim loop reads its claim task, not the shield around it):
    an exception is marked retrieved here, else asyncio would log every failed claim at ERROR."""
    tasks = [asyncio.ensure_future(a) for a in aws]
    try:
        await asyncio.wait(tasks, return_when=asyncio.FIRST_COMPLETED)
    finally:
        for task in tasks:
            if not task.done():
                task.cancel()
            elif not task.cancelled():
                task.exception()
