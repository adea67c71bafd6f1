"""The next task rides on the report that frees a permit: a completion or a pausing approval
request may carry ``claim`` and its answer the worker's next task, so a busy worker makes no claim
request between tasks. Against a real server (and, at the end, a real worker in this process)."""

from __future__ import annotations

import asyncio
from typing import Any

import httpx
import pytest
from atfg_agents import app as tester_app
from atfg_harness import ServerProcess
from atfg_waits import reach

from atfgraph import Client
from atfgraph._context import TraversalContext, _Attempt
from atfgraph._worker import _Running
from atfgraph.worker import Worker


@pytest.fixture
async def http(server: ServerProcess) -> Any:
    async with httpx.AsyncClient(base_url=server.url + "/api/v2", headers=server.headers(), timeout=30) as c:
        yield c


async def _worker(http: httpx.AsyncClient, node: str) -> str:
    answer = await http.post("/workers", json={"node_id": node, "version": "1", "capacity": 2})
    assert answer.status_code == 201, answer.text
    return str(answer.json()["id"])


async def _submit(http: httpx.AsyncClient, target: str) -> str:
    answer = await http.post("/traversers", json={"target": target, "input": {}})
    assert answer.status_code == 201, answer.text
    return str(answer.json()["id"])


async def _claim(http: httpx.AsyncClient, worker: str) -> dict[str, Any]:
    answer = await http.post(f"/workers/{worker}/claim", json={"max": 1})
    assert answer.status_code == 200, answer.text
    (task,) = answer.json()["tasks"]
    return dict(task)


async def _one_held_one_queued(http: httpx.AsyncClient, node: str) -> tuple[str, str, dict[str, Any], str]:
    """A worker of ``node`` holding one traverser while another is queued:
    (worker, held traverser, its task, queued traverser)."""
    worker = await _worker(http, node)
    held = await _submit(http, f"{node}.s")
    task = await _claim(http, worker)
    return worker, held, task, await _submit(http, f"{node}.s")


async def test_a_completion_carries_the_next_queued_task(http: httpx.AsyncClient) -> None:
    worker = await _worker(http, "nx")
    first, second = await _submit(http, "nx.s"), await _submit(http, "nx.s")
    task = await _claim(http, worker)
    assert task["traverser"]["id"] == first
    done = await http.post(
        f"/traversers/{first}/complete",
        json={"epoch": task["epoch"], "result": 1, "claim": {"worker_id": worker, "max": 1}},
    )
    assert done.status_code == 200, done.text
    body = done.json()
    assert body["status"] == "succeeded"
    (following,) = body["tasks"]
    assert following["traverser"]["id"] == second
    # Leased to that worker as a claim would lease it, with what its handler reads.
    assert set(following) >= {"traverser", "epoch", "lease_expires_at", "checkpoints", "steps", "approvals"}
    view = (await http.get(f"/traversers/{second}")).json()
    assert (view["status"], view["attempt"]) == ("running", 1)
    leases = {"leases": [{"id": second, "epoch": following["epoch"]}]}
    assert (await http.post(f"/workers/{worker}/heartbeat", json=leases)).json()["lost"] == []
    # Nothing more is queued: the answer carries no task, and no claim is needed to say so.
    last = await http.post(
        f"/traversers/{second}/complete",
        json={"epoch": following["epoch"], "claim": {"worker_id": worker, "max": 1}},
    )
    assert last.status_code == 200, last.text
    assert last.json()["tasks"] == []
    # Without ``claim`` the answer is as before (no task handed out).
    third = await _submit(http, "nx.s")
    task = await _claim(http, worker)
    fourth = await _submit(http, "nx.s")
    plain = await http.post(f"/traversers/{third}/complete", json={"epoch": task["epoch"]})
    assert plain.json()["tasks"] == []
    assert (await http.get(f"/traversers/{fourth}")).json()["status"] == "queued"


async def test_a_pause_carries_the_next_task_and_a_non_pausing_request_hands_out_none(
    http: httpx.AsyncClient,
) -> None:
    worker, first, task, second = await _one_held_one_queued(http, "np")
    body = {
        "traverser_id": first,
        "operation_key": "k",
        "prompt": "ok?",
        "claim": {"worker_id": worker, "max": 1},
    }
    # pause=False frees no permit: nothing is handed out even though work is queued.
    kept = await http.post("/approvals", json={**body, "epoch": task["epoch"], "pause": False})
    assert kept.status_code == 200, kept.text
    assert (kept.json()["paused"], kept.json()["tasks"]) == (False, [])
    assert (await http.get(f"/traversers/{second}")).json()["status"] == "queued"
    paused = await http.post("/approvals", json={**body, "epoch": task["epoch"]})
    assert paused.status_code == 200, paused.text
    assert paused.json()["paused"] is True
    (following,) = paused.json()["tasks"]
    assert following["traverser"]["id"] == second
    assert (await http.get(f"/traversers/{first}")).json()["status"] == "waiting"


async def test_a_claim_for_an_unknown_worker_hands_out_nothing_but_the_report_stands(
    http: httpx.AsyncClient,
) -> None:
    _, first, task, second = await _one_held_one_queued(http, "nu")
    done = await http.post(
        f"/traversers/{first}/complete",
        json={"epoch": task["epoch"], "claim": {"worker_id": "no-such-worker", "max": 1}},
    )
    assert done.status_code == 200, done.text
    assert done.json() == {"status": "succeeded", "tasks": []}
    assert (await http.get(f"/traversers/{second}")).json()["status"] == "queued"


async def test_a_busy_worker_needs_no_claim_between_tasks(server: ServerProcess, client: Client) -> None:
    """One permit, twenty queued tasks: each completion brings the next, so the worker's claim
    requests are far fewer than its tasks (one long poll to start, and any that found the queue
    momentarily empty)."""
    handles = [await client.submit("tester.lookup", {"ticket": f"t-{i}"}) for i in range(20)]
    requests_before = (await client.request("GET", "/stats"))["requests"]
    worker = Worker(tester_app, server.url, capacity=1)
    running = asyncio.create_task(worker.run())
    try:
        for i, handle in enumerate(handles):
            assert await handle.result(timeout=30) == {"ticket": f"T-{i}"}
        # The last result is visible once its completion commits; the worker counts it when the
        # answer reaches it, a moment later.
        for _ in range(100):
            if worker.stats.succeeded == 20:
                break
            await asyncio.sleep(0.05)
        assert worker.stats.claimed == 20
        assert worker.stats.succeeded == 20
        assert worker.stats.lost == 0
    finally:
        worker.stop()
        await asyncio.wait_for(running, 30)
    requests = (await client.request("GET", "/stats"))["requests"] - requests_before
    # Per task: one completion and the client's result; plus the worker's registration, a claim
    # or two, heartbeats, its release and the final counters. Without the ride-along claims it
    # would be at least 20 more.
    assert requests < 20 + 20 + 12, requests
    await reach(client, handles[-1].id, "succeeded")


def _attempt_for(worker: Worker, ident: str, epoch: int) -> _Attempt:
    context = TraversalContext(ident, "tester.lookup", "tester", "1.0.0", 1, 3, epoch, worker.worker_id or "")
    return _Attempt(context=context, transport=worker.transport, checkpoints={}, steps={}, approvals={})


async def test_a_heartbeat_stops_only_the_attempt_it_spoke_for(server: ServerProcess) -> None:
    """A heartbeat's "lost" answer may arrive after the attempt it listed made the call that
    closed its lease (a pause, the completion), or after the same traverser started again here
    under a newer lease (a continuation handed out with that answer). Neither may be cancelled:
    the in-flight call's own answer tells, and a newer lease is not the one the heartbeat named.
    A lease the server no longer holds, with no call out, is stopped as before."""
    worker = Worker(tester_app, server.url, capacity=2)
    await worker._register()
    try:
        # The server holds no lease on "gone" (any id it does not know is lost to it).
        busy = asyncio.create_task(asyncio.sleep(30))
        running = _Running("gone", 7, busy, attempt=_attempt_for(worker, "gone", 7))
        assert running.attempt is not None
        running.attempt.calls_in_flight = 1
        worker._running["gone"] = running
        await worker._heartbeat_once()
        await asyncio.sleep(0)
        assert not busy.done()  # its own call is out: that answer decides
        # The heartbeat names epoch 7; before its answer the traverser runs here under epoch 8.
        running.attempt.calls_in_flight = 0
        beat = asyncio.create_task(worker._heartbeat_once())
        await asyncio.sleep(0)  # the request is built and on its way
        newer = asyncio.create_task(asyncio.sleep(30))
        worker._running["gone"] = _Running("gone", 8, newer, attempt=_attempt_for(worker, "gone", 8))
        await beat
        await asyncio.sleep(0)
        assert not newer.done()
        # With no call out and the lease named by the heartbeat, it is stopped.
        await worker._heartbeat_once()
        await asyncio.sleep(0)
        assert newer.cancelled()
        busy.cancel()
    finally:
        worker._running.clear()
        await worker.transport.aclose()
