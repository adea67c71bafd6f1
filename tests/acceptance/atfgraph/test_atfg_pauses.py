"""Rules 1-4 and 8: pauses hold nothing, decisions continue the traverser, approval identity,
the attempt budget, expiry and ``pause=False``; against a real server and worker processes."""

from __future__ import annotations

import asyncio
import threading
import time
from collections.abc import Callable

import pytest
from atfg_agents import app as tester_app
from atfg_harness import ServerProcess, WorkerProcess, wait_until
from atfg_waits import only_approval, reach

from atfgraph import ApprovalConflictError, ApprovalDecidedError, Client, NotFoundError
from atfgraph.worker import Worker


async def test_rule1_waiting_traversers_hold_no_permit_in_the_worker_process(
    server: ServerProcess, spawn_worker: Callable[..., WorkerProcess], client: Client
) -> None:
    spawn_worker()  # capacity 2
    handles = [await client.submit("tester.pausing", {"key": f"k{i}"}) for i in range(12)]
    for handle in handles:
        info = await reach(client, handle.id, "waiting")
        assert not info.is_terminal
    # Twelve pauses went through two permits: each pause gave its permit back.
    assert server.get("/traversers", status="running")["items"] == []
    assert len(server.get("/traversers", status="waiting")["items"]) == 12

    def reported() -> bool:
        stats = server.workers("tester")[0]["stats"]
        return stats is not None and stats["paused"] == 12

    wait_until(reported, 10, "the worker never reported 12 pauses")
    stats = server.workers("tester")[0]["stats"]
    assert stats["permits_in_use"] == 0
    assert stats["claimed"] == 12


async def test_rule1_in_process_worker_keeps_no_task_or_thread_per_waiting_traverser(
    server: ServerProcess, client: Client
) -> None:
    threads_before = threading.active_count()
    worker = Worker(tester_app, server.url, capacity=2)
    running = asyncio.create_task(worker.run())
    try:
        handles = [await client.submit("tester.pausing", {"key": f"k{i}"}) for i in range(40)]
        for handle in handles:
            await reach(client, handle.id, "waiting")
        # "waiting" is visible as soon as the pause commits; the worker counts the pause and gives
        # its permit back when the answer reaches it, a moment later.
        for _ in range(100):
            if worker.stats.paused == 40 and worker.permits_in_use == 0:
                break
            await asyncio.sleep(0.05)
        assert worker.stats.paused == 40
        assert worker.permits_in_use == 0
        # Only the worker's own loops remain: nothing per waiting traverser.
        names = [t.get_name() for t in asyncio.all_tasks() if "atfgraph:" in t.get_name()]
        assert names == []
        assert threading.active_count() <= threads_before + 1
    finally:
        worker.stop()
        await asyncio.wait_for(running, 30)


async def test_rule1_pause_cannot_be_swallowed_by_except_exception(
    server: ServerProcess, spawn_worker: Callable[..., WorkerProcess], client: Client
) -> None:
    spawn_worker()
    handle = await client.submit("tester.swallowing")
    await reach(client, handle.id, "waiting")

    def reported() -> bool:
        stats = server.workers("tester")[0]["stats"]
        return stats is not None and stats["paused"] + stats["lost"] + stats["succeeded"] >= 1

    # The handler was stopped by the pause itself: not returned early and then fenced off.
    wait_until(reported, 10, "the worker never reported the attempt")
    stats = server.workers("tester")[0]["stats"]
    assert (stats["paused"], stats["lost"], stats["succeeded"]) == (1, 0, 0)
    await client.decide_approval((await only_approval(client, handle.id))["id"], "approved")
    assert await handle.result(timeout=15) == {"swallowed": False, "status": "approved", "attempt": 2}


@pytest.mark.parametrize("decision", ["approved", "rejected"])
async def test_rule2_decision_continues_with_next_attempt_and_returns_stored_record(
    spawn_worker: Callable[..., WorkerProcess], client: Client, decision: str
) -> None:
    spawn_worker()
    handle = await client.submit(
        "tester.pausing", {"prompt": {"q": "ok?"}, "key": "op-1", "checkpoint": {"case": 7}}
    )
    info = await reach(client, handle.id, "waiting")
    assert info.attempt == 1
    approval = await only_approval(client, handle.id)
    assert await client.get_approval(str(approval["id"])) == approval
    assert approval["status"] == "pending" and approval["checkpoint"] == {"case": 7}

    decided = await client.decide_approval(str(approval["id"]), decision, {"note": "n"})
    assert decided["status"] == decision and decided["decided_by"] == "owner"

    result = await handle.result(timeout=15)
    assert result["attempt"] == 2
    record = result["decision"]
    assert {k: record[k] for k in ("id", "status", "traverser_id", "operation_key", "prompt")} == {
        "id": approval["id"],
        "status": decision,
        "traverser_id": handle.id,
        "operation_key": "op-1",
        "prompt": {"q": "ok?"},
    }
    assert record["checkpoint"] == {"case": 7}
    assert record["decided_by"] == "owner"
    assert record["response"] == {"note": "n"}
    assert await client.list_approvals(traverser_id=handle.id) == []


async def test_rule2_child_steps_are_replayed_not_rerun(
    spawn_worker: Callable[..., WorkerProcess], client: Client
) -> None:
    spawn_worker()
    handle = await client.submit("tester.with_steps")
    await reach(client, handle.id, "waiting")
    await client.decide_approval(str((await only_approval(client, handle.id))["id"]), "approved")
    result = await handle.result(timeout=15)
    assert result == {"a": {"ticket": "AB"}, "b": {"ticket": "CD"}, "status": "approved", "attempt": 2}
    path = await handle.path()
    assert [(i.target, i.status, i.attempt) for i in path.items] == [
        ("tester.with_steps", "succeeded", 2),
        ("tester.lookup", "succeeded", 1),
        ("tester.lookup", "succeeded", 1),
    ]


async def test_rule3_identity_conflicts_and_idempotent_decisions(
    spawn_worker: Callable[..., WorkerProcess], client: Client
) -> None:
    spawn_worker()
    handle = await client.submit("tester.pausing", {"prompt": "first", "key": "same"})
    await reach(client, handle.id, "waiting")
    approval = await only_approval(client, handle.id)

    # Same key, different prompt: 409 approval_conflict (over HTTP, from any caller).
    with pytest.raises(ApprovalConflictError) as conflict:
        await client.request_approval(handle.id, "second", operation_key="same")
    assert conflict.value.status == 409 and conflict.value.code == "approval_conflict"
    # Same key, same prompt: the same approval.
    again = await client.request_approval(handle.id, "first", operation_key="same")
    assert again["id"] == approval["id"]

    first = await client.decide_approval(str(approval["id"]), "approved")
    repeat = await client.decide_approval(str(approval["id"]), "approved")
    assert repeat == first
    with pytest.raises(ApprovalDecidedError) as decided:
        await client.decide_approval(str(approval["id"]), "rejected")
    assert decided.value.status == 409 and decided.value.code == "approval_decided"
    assert (await handle.result(timeout=15))["decision"]["status"] == "approved"
    with pytest.raises(NotFoundError):
        await client.decide_approval("no-such-approval", "approved")


async def test_rule3_a_handler_that_changes_its_prompt_gets_approval_conflict(
    spawn_worker: Callable[..., WorkerProcess], client: Client
) -> None:
    spawn_worker()
    handle = await client.submit("tester.drifting_prompt")
    await reach(client, handle.id, "waiting")
    await client.decide_approval(str((await only_approval(client, handle.id))["id"]), "approved")
    assert await handle.result(timeout=15) == {"conflict": "approval_conflict", "attempt": 2}


async def test_rule4_continuation_adds_an_attempt_and_review_time_is_not_timed(
    spawn_worker: Callable[..., WorkerProcess], client: Client
) -> None:
    spawn_worker()
    # max_attempts=1: without the extra attempt the continuation could not run at all.
    handle = await client.submit("tester.pausing", {"key": "budget"}, max_attempts=1)
    await reach(client, handle.id, "waiting")
    assert (await client.get(handle.id)).max_attempts == 1
    await client.decide_approval(str((await only_approval(client, handle.id))["id"]), "approved")
    result = await handle.result(timeout=15)
    assert (result["attempt"], result["max_attempts"]) == (2, 2)

    # quick_review has timeout_seconds=1; the review below takes longer than that.
    timed = await client.submit("tester.quick_review", max_attempts=1)
    await reach(client, timed.id, "waiting")
    await asyncio.sleep(1.5)
    await client.decide_approval(str((await only_approval(client, timed.id))["id"]), "approved")
    assert await timed.result(timeout=15) == {"status": "approved", "attempt": 2}


async def test_rule4_the_timeout_still_bounds_an_active_attempt(
    spawn_worker: Callable[..., WorkerProcess], client: Client
) -> None:
    spawn_worker()
    handle = await client.submit("tester.too_slow", max_attempts=2)
    info = await reach(client, handle.id, "failed")
    assert info.error is not None and info.error.code == "timeout"
    assert info.attempt == 2


async def test_rule8_expiry_resumes_the_handler_with_status_expired(
    spawn_worker: Callable[..., WorkerProcess], client: Client
) -> None:
    spawn_worker()
    started = time.monotonic()
    handle = await client.submit("tester.pausing", {"key": "exp", "expires_in_seconds": 0.5})
    result = await handle.result(timeout=15)
    assert result["decision"]["status"] == "expired"
    assert result["attempt"] == 2
    assert time.monotonic() - started >= 0.5
    with pytest.raises(ApprovalDecidedError):
        await client.decide_approval(result["decision"]["id"], "approved")


async def test_rule8_expiry_that_fell_due_while_the_server_was_down(
    server: ServerProcess, spawn_worker: Callable[..., WorkerProcess]
) -> None:
    spawn_worker()
    async with Client(server.url) as client:
        handle = await client.submit("tester.pausing", {"key": "down", "expires_in_seconds": 1.0})
        await reach(client, handle.id, "waiting")
    server.kill()
    await asyncio.sleep(1.5)  # the approval falls due while nothing is running
    server.start()
    async with Client(server.url) as client:
        result = await client.handle(handle.id).result(timeout=30)
        assert result["decision"]["status"] == "expired"
        assert result["decision"]["decided_by"] == "system:expiry"


async def test_rule8_pause_false_creates_the_approval_and_keeps_running(
    spawn_worker: Callable[..., WorkerProcess], client: Client
) -> None:
    spawn_worker()
    handle = await client.submit("tester.not_pausing")
    result = await handle.result(timeout=15)
    assert result["approval_status"] == "pending" and result["attempt"] == 1
    listed = await client.list_approvals(traverser_id=handle.id)
    assert [a["id"] for a in listed] == [result["approval_id"]]
    assert listed[0]["expires_at"] is not None
    # Deciding it later records the decision without re-running the finished traverser.
    await client.decide_approval(result["approval_id"], "approved")
    info = await client.get(handle.id)
    assert (info.status, info.attempt) == ("succeeded", 1)

    # The client's own request_approval(pause=False) on a running-or-waiting traverser.
    other = await client.submit("tester.pausing", {"key": "main"})
    await reach(client, other.id, "waiting")
    side = await client.request_approval(other.id, {"side": 1}, operation_key="side", pause=False)
    assert side["status"] == "pending"
    await client.decide_approval(side["id"], "rejected")
    assert (await client.get(other.id)).status == "waiting"  # still waiting on its own approval
    with pytest.raises(ValueError):
        await client.request_approval(other.id, "x", operation_key="y", pause=True)


async def test_a_decision_made_before_the_pause_is_not_lost(
    spawn_worker: Callable[..., WorkerProcess], client: Client
) -> None:
    spawn_worker()
    handle = await client.submit("tester.decided_while_running")
    await reach(client, handle.id, "running")
    for _ in range(100):
        pending = await client.list_approvals(traverser_id=handle.id)
        if pending:
            break
        await asyncio.sleep(0.02)
    await client.decide_approval(str(pending[0]["id"]), "approved")
    assert await handle.result(timeout=15) == {"status": "approved", "attempt": 1}


async def test_a_worker_runs_at_most_capacity_handlers(
    server: ServerProcess, spawn_worker: Callable[..., WorkerProcess], client: Client
) -> None:
    spawn_worker()  # capacity 2
    handles = [await client.submit("tester.slow_finish", {"seconds": 0.6}) for _ in range(5)]
    most = 0
    async with asyncio.timeout(30):
        while True:
            most = max(most, len(server.get("/traversers", status="running")["items"]))
            states = [(await client.get(h.id)).status for h in handles]
            if all(state == "succeeded" for state in states):
                break
            await asyncio.sleep(0.05)
    assert most == 2
