"""The next task rides on the report that frees a permit: a completion or a pausing approval
request may carry ``claim`` and its answer the worker's next task, so a busy worker makes no claim
request between tasks; with ``claim.wait_seconds`` the answer waits for one (a long poll riding on
the committed report), so an idle one makes none either. Against a real server (and real workers
in this process)."""

from __future__ import annotations

import asyncio
import time
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
        worker._running["gone", 7] = running
        await worker._heartbeat_once()
        await asyncio.sleep(0)
        assert not busy.done()  # its own call is out: that answer decides
        # The heartbeat names epoch 7; before its answer the traverser runs here under epoch 8
        # too (epoch 7's call has been answered; its coroutine has not ended yet).
        running.attempt.calls_in_flight = 0
        beat = asyncio.create_task(worker._heartbeat_once())
        await asyncio.sleep(0)  # the request is built and on its way
        newer = asyncio.create_task(asyncio.sleep(30))
        worker._running["gone", 8] = _Running("gone", 8, newer, attempt=_attempt_for(worker, "gone", 8))
        await beat
        await asyncio.sleep(0)
        assert not newer.done() and not busy.done()
        # With no call out and the lease named by the heartbeat (the newest), it is stopped.
        await worker._heartbeat_once()
        await asyncio.sleep(0)
        assert newer.cancelled() and not busy.done()
        busy.cancel()
    finally:
        worker._running.clear()
        await worker.transport.aclose()


async def test_a_completion_may_wait_for_the_next_task(http: httpx.AsyncClient, client: Client) -> None:
    """With ``wait_seconds`` the report commits at once (its followers see it), and its answer
    comes when work is queued for the node: a task submitted while it waits."""
    worker = await _worker(http, "nw")
    first = await _submit(http, "nw.s")
    task = await _claim(http, worker)
    body = {"epoch": task["epoch"], "result": 7, "claim": {"worker_id": worker, "max": 1, "wait_seconds": 10}}
    started = time.monotonic()
    report = asyncio.create_task(http.post(f"/traversers/{first}/complete", json=body))
    # The completion is committed before the answer: a client following the traverser sees it.
    assert await client.handle(first).result(timeout=5) == 7
    await asyncio.sleep(0.3)
    assert not report.done()  # still waiting for work
    second = await _submit(http, "nw.s")
    answer = await asyncio.wait_for(report, 10)
    assert answer.status_code == 200, answer.text
    assert answer.json()["status"] == "succeeded"
    (following,) = answer.json()["tasks"]
    assert following["traverser"]["id"] == second
    assert time.monotonic() - started < 5  # answered by the work, not by its deadline
    view = (await http.get(f"/traversers/{second}")).json()
    assert (view["status"], view["attempt"]) == ("running", 1)
    # Nothing queued for its whole wait: the answer comes at the deadline with no task.
    body = {"epoch": following["epoch"], "claim": {"worker_id": worker, "max": 1, "wait_seconds": 0.5}}
    started = time.monotonic()
    idle = await http.post(f"/traversers/{second}/complete", json=body)
    assert idle.status_code == 200, idle.text
    assert idle.json() == {"status": "succeeded", "tasks": []}
    assert 0.4 < time.monotonic() - started < 5


async def _waiting_pause(
    http: httpx.AsyncClient, node: str, **extra: Any
) -> tuple[str, dict[str, Any], dict[str, Any]]:
    """A worker of ``node`` holding a traverser, and the body of its pausing approval request
    whose answer may wait 10 s for the next task: (traverser, its task, the body)."""
    worker = await _worker(http, node)
    first = await _submit(http, f"{node}.s")
    task = await _claim(http, worker)
    claim = {"worker_id": worker, "max": 1, "wait_seconds": 10}
    body = {
        "traverser_id": first,
        "operation_key": "k",
        "prompt": "ok?",
        "epoch": task["epoch"],
        "claim": claim,
    }
    return first, task, {**body, **extra}


async def test_a_pause_may_wait_for_its_own_continuation(http: httpx.AsyncClient) -> None:
    """A pausing approval request that waits: the decision queues the traverser's continuation,
    which comes back in the pause's own answer, leased to the same worker."""
    first, task, body = await _waiting_pause(http, "nc")
    pause = asyncio.create_task(http.post("/approvals", json=body))
    for _ in range(100):  # the pause commits before its answer waits
        view = (await http.get(f"/traversers/{first}")).json()
        if view["status"] == "waiting":
            break
        await asyncio.sleep(0.05)
    assert view["status"] == "waiting"
    assert not pause.done()
    decided = await http.post(f"/approvals/{view['waiting_on']}/decide", json={"decision": "approved"})
    assert decided.status_code == 200, decided.text
    answer = await asyncio.wait_for(pause, 10)
    assert answer.status_code == 200, answer.text
    assert answer.json()["paused"] is True
    (continuation,) = answer.json()["tasks"]
    assert continuation["traverser"]["id"] == first
    assert continuation["epoch"] > task["epoch"]
    assert [a["status"] for a in continuation["approvals"]] == ["approved"]


@pytest.mark.parametrize("wait", [-1, 30.5, "5", True, [], {}])
async def test_a_bad_wait_is_refused_before_the_report_changes_anything(
    http: httpx.AsyncClient, wait: Any
) -> None:
    worker, first, task, second = await _one_held_one_queued(http, "nb")
    claim = {"worker_id": worker, "max": 1, "wait_seconds": wait}
    done = await http.post(f"/traversers/{first}/complete", json={"epoch": task["epoch"], "claim": claim})
    assert done.status_code == 422, done.text
    assert done.json()["error"]["code"] == "validation_error"
    assert "body.claim.wait_seconds" in done.json()["error"]["message"]
    paused = await http.post(
        "/approvals",
        json={
            "traverser_id": first,
            "operation_key": "k",
            "prompt": "?",
            "epoch": task["epoch"],
            "claim": claim,
        },
    )
    assert paused.status_code == 422, paused.text
    assert (await http.get(f"/traversers/{first}")).json()["status"] == "running"
    assert (await http.get(f"/traversers/{second}")).json()["status"] == "queued"
    assert (await http.get("/approvals", params={"traverser_id": first})).json()["items"] == []


async def test_a_worker_gone_from_a_waiting_report_is_leased_nothing(server: ServerProcess) -> None:
    """A report whose answer waits for work, and whose client closed its connection meanwhile:
    the report stands, and the work queued later stays queued for the next claim."""
    headers = server.headers("worker")
    async with httpx.AsyncClient(base_url=server.url + "/api/v2", headers=headers, timeout=30) as http:
        worker = await _worker(http, "ng")
        owner = {"Authorization": server.headers("owner")["Authorization"]}
        created = await http.post("/traversers", json={"target": "ng.s", "input": {}}, headers=owner)
        first = created.json()["id"]
        task = await _claim(http, worker)
        reader, writer = await asyncio.open_connection("127.0.0.1", server.port)
        body = (
            b'{"epoch": %d, "worker_id": "%s", "claim": {"worker_id": "%s", "max": 1, "wait_seconds": 10}}'
            % (task["epoch"], worker.encode(), worker.encode())
        )
        head = "".join(f"{k}: {v}\r\n" for k, v in headers.items())
        writer.write(
            f"POST /api/v2/traversers/{first}/complete HTTP/1.1\r\nHost: x\r\n{head}"
            f"Content-Type: application/json\r\nContent-Length: {len(body)}\r\n\r\n".encode()
            + body
        )
        await writer.drain()
        await asyncio.sleep(0.3)  # the report committed, its answer is waiting
        assert not reader._buffer, bytes(reader._buffer)  # type: ignore[attr-defined]  # no answer yet
        writer.close()
        await writer.wait_closed()
        await asyncio.sleep(0.2)
        assert (await http.get(f"/traversers/{first}", headers=owner)).json()["status"] == "succeeded"
        assert (await http.post(f"/workers/{worker}/heartbeat", json={})).status_code == 200
        created = await http.post("/traversers", json={"target": "ng.s", "input": {}}, headers=owner)
        await asyncio.sleep(0.3)  # the waiting answer woke, saw its client gone, and leased nothing
        got = await http.get(f"/traversers/{created.json()['id']}", headers=owner)
        assert got.json()["status"] == "queued", got.json()


async def test_an_idle_worker_makes_no_claim_of_its_own_between_tasks(
    server: ServerProcess, client: Client
) -> None:
    """Tasks that come one at a time, each after the last one finished: the completion's answer
    waits for the next, so the server sees per task only the client's submission and result and
    the worker's completion (and a pause's continuation comes in the pause's answer)."""
    worker = Worker(tester_app, server.url, capacity=1, report_wait_seconds=5)
    running = asyncio.create_task(worker.run())
    try:
        first = await client.submit("tester.lookup", {"ticket": "t-first"})  # the worker's first claim
        assert await first.result(timeout=30) == {"ticket": "T-FIRST"}
        await asyncio.sleep(0.2)  # its completion's answer is now waiting for work
        before = (await client.request("GET", "/stats"))["requests"]
        for i in range(10):
            handle = await client.submit("tester.lookup", {"ticket": f"t-{i}"})
            assert await handle.result(timeout=30) == {"ticket": f"T-{i}"}
        pausing = await client.submit("tester.pausing", {"prompt": "go?"})
        waiting = await client.wait_for_status(pausing.id, "waiting", 30)
        assert waiting.waiting_on is not None
        await client.decide_approval(waiting.waiting_on, "approved")
        assert (await pausing.result(timeout=30))["attempt"] == 2
        requests = (await client.request("GET", "/stats"))["requests"] - before
    finally:
        worker.stop()
        await asyncio.wait_for(running, 30)
    # 10 x (submit, result, completion) + the pause: submit, wait, decide, result, the pause
    # request, the completion; the two /stats reads; no claims (a heartbeat may fall in it).
    assert requests <= 30 + 6 + 2 + 2, requests
    # claimed: each attempt started (the pausing one twice)
    assert worker.stats.claimed == 13 and worker.stats.succeeded == 12 and worker.stats.paused == 1
    assert worker.stats.lost == 0


async def test_a_stopping_worker_is_not_held_by_a_waiting_report(
    server: ServerProcess, client: Client
) -> None:
    """A report's answer waits at most ``report_wait_seconds`` (a second, or half the grace),
    and no new report asks for work once stopping: the worker stops within its grace, having
    counted its last completion."""
    assert Worker(tester_app, server.url).report_wait_seconds == 1.0
    worker = Worker(tester_app, server.url, capacity=1, grace_seconds=4, report_wait_seconds=3)
    assert Worker(tester_app, server.url, grace_seconds=1).report_wait_seconds == 0.5
    running = asyncio.create_task(worker.run())
    try:
        handle = await client.submit("tester.lookup", {"ticket": "t"})
        assert await handle.result(timeout=30) == {"ticket": "T"}
    finally:
        started = time.monotonic()
        worker.stop()
        await asyncio.wait_for(running, 30)
    assert time.monotonic() - started < 4
    assert worker.stats.succeeded == 1 and worker.stats.lost == 0 and worker.stats.released == 0


async def test_a_pause_that_mints_a_decision_link_is_answered_at_once(http: httpx.AsyncClient) -> None:
    """The link's URL is in that answer only, and the handler hands it on when the answer comes:
    such an answer does not wait for work, whatever the claim asks."""
    _first, _task, body = await _waiting_pause(http, "nl", decision_link=True)
    started = time.monotonic()
    answer = await http.post("/approvals", json=body)
    assert answer.status_code == 200, answer.text
    assert time.monotonic() - started < 5
    assert answer.json()["paused"] is True and answer.json()["tasks"] == []
    assert answer.json()["decision_link"]["url"].startswith("http")
