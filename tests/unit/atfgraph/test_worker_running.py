"""The worker's book of running attempts (``Worker._running``) when a traverser's next attempt
starts before its previous attempt's coroutine has ended.

That happens at every pause with work around: the pause report's answer may wait for the next
task (a ride of up to ``report_wait_seconds``); meanwhile the approval is decided and the
continuation is handed to another of this worker's polls, which starts it at once. Both
attempts are then in the book, under the same traverser id and different epochs: the old one
until its report's answer comes, the new one until it ends. Found by reading; the book was keyed
by traverser id alone, so the new entry overwrote the old and the old attempt's end then removed
the new one: its lease was no longer heartbeated (lost after a lease, the handler run a third
time), the worker claimed past its capacity, and a stopping worker neither drained nor released
it.

The server is a scripted transport in the test: every request the worker makes is answered here."""

from __future__ import annotations

import asyncio
from typing import Any

from atfgraph import Agent
from atfgraph._worker import Worker

PROMPT = {"question": "Refund 40 EUR?"}


class Scripted:
    """The server's side: the first attempt's pause is answered only when ``pause_answered`` is
    set (its ride waiting for the next task); heartbeats are recorded."""

    def __init__(self) -> None:
        self.pause_answered = asyncio.Event()
        self.heartbeats: list[list[dict[str, Any]]] = []
        self.completed: list[int] = []
        self.unexpected: list[str] = []
        #: each pause: its traverser, and whether it asked for the next task
        self.asked_next: list[tuple[str, bool]] = []
        #: what the next heartbeat answers lost
        self.lost: list[str] = []

    async def request(
        self,
        method: str,
        path: str,
        body: Any = None,
        params: dict[str, Any] | None = None,
        read_timeout: float | None = None,
    ) -> Any:
        if path == "/approvals":
            self.asked_next.append((body["traverser_id"], "claim" in body))
            await self.pause_answered.wait()
            approval = {"operation_key": "refund", "status": "pending", "prompt": PROMPT}
            return {"approval": approval, "paused": True, "tasks": []}
        if path.endswith("/heartbeat"):
            self.heartbeats.append(body["leases"])
            lost, self.lost = self.lost, []
            return {"lost": lost}
        if path.endswith("/complete"):
            self.completed.append(body["epoch"])
            return {"status": "succeeded", "tasks": []}
        self.unexpected.append(f"{method} {path}")
        raise AssertionError(f"unexpected request {method} {path}")

    async def aclose(self) -> None:
        return None


def task(epoch: int, approvals: list[dict[str, Any]], ident: str = "t1") -> dict[str, Any]:
    trav = {"id": ident, "target": "refunds.refund", "attempt": epoch, "max_attempts": 3, "input": {}}
    return {"traverser": trav, "epoch": epoch, "checkpoints": {}, "steps": [], "approvals": approvals}


async def until(predicate: Any) -> None:
    for _ in range(300):
        if predicate():
            return
        await asyncio.sleep(0.01)
    raise AssertionError("the worker never got there")


class Refunds:
    """A worker of one skill that pauses for an approval and, once it is decided, runs until the
    test lets it end, served by the scripted server; :meth:`both_attempts` brings it to the state
    under test."""

    def __init__(self) -> None:
        self.agent = Agent("refunds")
        self.continuation_may_end = asyncio.Event()
        self.continuation_running = asyncio.Event()

        @self.agent.skill
        async def refund() -> dict[str, Any]:
            decided = await self.agent.request_approval(PROMPT, operation_key="refund")
            self.continuation_running.set()
            await self.continuation_may_end.wait()
            return {"status": decided["status"]}

        self.worker = Worker(self.agent, "http://127.0.0.1:1", capacity=4, token="t")
        self.server = Scripted()
        self.worker.transport = self.server  # type: ignore[assignment]
        self.worker.worker_id = "w1"

    async def both_attempts(self) -> None:
        """The first attempt paused, its answer waiting; the continuation started and running."""
        self.worker._start(task(1, []))  # pauses; the pause's answer waits
        await until(lambda: self.worker.permits_in_use == 0)  # its report is out: the permit is freeing
        approved = {"operation_key": "refund", "status": "approved", "prompt": PROMPT}
        self.worker._start(task(2, [approved]))  # the continuation, from another poll's answer
        await asyncio.wait_for(self.continuation_running.wait(), 5)


async def test_a_continuation_started_while_the_pause_report_waits_keeps_its_own_entry() -> None:
    refunds = Refunds()
    worker, server = refunds.worker, refunds.server
    await refunds.both_attempts()
    assert len(worker._running) == 2 and worker.permits_in_use == 1

    server.pause_answered.set()  # the first attempt's answer comes: that attempt is over
    await until(lambda: worker.stats.paused == 1)  # counted just before its coroutine ends
    await asyncio.sleep(0)
    assert len(worker._running) == 1 and worker.permits_in_use == 1  # the continuation's
    await worker._heartbeat_once()
    assert server.heartbeats[-1] == [{"id": "t1", "epoch": 2}]  # its lease is kept alive

    refunds.continuation_may_end.set()
    await until(lambda: not worker._running)
    assert server.completed == [2] and worker.stats.succeeded == 1 and worker.stats.paused == 1
    assert server.unexpected == []


async def test_while_both_attempts_are_in_the_book_only_the_newest_lease_is_heartbeated_and_lost() -> None:
    refunds = Refunds()
    worker, server = refunds.worker, refunds.server
    await refunds.both_attempts()
    # The old epoch's lease was closed by its pause (and replaced by the new claim's): only the
    # new one is the worker's to keep.
    await worker._heartbeat_once()
    assert server.heartbeats[-1] == [{"id": "t1", "epoch": 2}]
    # That lease lost (say it expired): the continuation stops; the first attempt, whose report
    # still waits for its answer, is not touched.
    server.lost = ["t1"]
    await worker._heartbeat_once()
    await until(lambda: worker.stats.lost == 1)
    assert [r.epoch for r in worker._running.values()] == [1]
    server.pause_answered.set()
    await until(lambda: not worker._running)
    assert worker.stats.paused == 1 and server.completed == [] and server.unexpected == []


async def test_one_report_at_a_time_waits_for_the_next_task() -> None:
    """While one pause's answer may wait for the next task, another pause asks for none: its
    permit is freed when it is answered, for the worker's own poll. Once the first is answered,
    the next report asks again."""
    refunds = Refunds()
    worker, server = refunds.worker, refunds.server
    worker._start(task(1, [], "t1"))
    worker._start(task(1, [], "t2"))
    await until(lambda: len(server.asked_next) == 2)
    assert sorted(asked for _, asked in server.asked_next) == [False, True]
    server.pause_answered.set()
    await until(lambda: worker.stats.paused == 2 and not worker._running)
    assert worker._rides.out == 0
    worker._start(task(1, [], "t3"))
    await until(lambda: len(server.asked_next) == 3)
    assert server.asked_next[-1] == ("t3", True)
    await until(lambda: not worker._running)
    assert server.unexpected == []
