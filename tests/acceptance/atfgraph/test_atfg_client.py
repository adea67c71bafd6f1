"""The client's following and convenience calls against a real server and worker."""

from __future__ import annotations

import asyncio
import re
import time
from collections.abc import Callable

import pytest
from atfg_harness import ServerProcess, WorkerProcess
from atfg_waits import reach

from atfgraph import Client, TraverserFailedError, TraverserTimeoutError


async def test_traverse_and_submit_and_wait(
    spawn_worker: Callable[..., WorkerProcess], client: Client
) -> None:
    spawn_worker()
    assert await client.traverse("tester.lookup", ticket="qf1", timeout=15) == {"ticket": "QF1"}
    assert await client.traverse("tester.lookup", {"ticket": "a"}, timeout=15) == {"ticket": "A"}

    handle, info = await client.submit_and_wait(
        "tester.pausing", {"key": "saw"}, statuses="waiting", timeout=15
    )
    assert info.status == "waiting" and info.waiting_on is not None
    approval = await client.get_approval(info.waiting_on)
    assert approval["traverser_id"] == handle.id and approval["operation_key"] == "saw"
    await client.decide_approval(info.waiting_on, "rejected")
    assert (await client.wait(handle.id, timeout=15)).result["decision"]["status"] == "rejected"


async def test_waits_time_out_and_failures_raise(
    spawn_worker: Callable[..., WorkerProcess], client: Client
) -> None:
    spawn_worker()
    handle = await client.submit("tester.pausing", {"key": "slow"})
    await reach(client, handle.id, "waiting")
    with pytest.raises(TraverserTimeoutError):
        await handle.result(timeout=0.3)  # waiting is not terminal: the client keeps waiting
    assert [t.id for t in await client.list_traversers("waiting")] == [handle.id]

    cancelled = await client.cancel(handle.id)
    assert cancelled.status == "cancelled" and cancelled.is_terminal
    assert await client.list_approvals(traverser_id=handle.id) == []  # out of the inbox
    [approval] = await client.list_approvals(status="expired", traverser_id=handle.id)
    assert approval["decided_by"] == "system:cancelled"
    with pytest.raises(TraverserFailedError) as failed:
        await handle.result(timeout=5)
    assert failed.value.status == "cancelled"

    with pytest.raises(TraverserFailedError) as refused:
        await client.traverse("tester.refuse", code="no", timeout=15)
    assert refused.value.error is not None and refused.value.error.code == "no"


async def test_traverse_times_out_after_the_whole_timeout_and_says_so(
    spawn_worker: Callable[..., WorkerProcess], client: Client
) -> None:
    spawn_worker()
    started = time.monotonic()
    with pytest.raises(TraverserTimeoutError) as timed_out:
        await client.traverse("tester.pausing", {"key": "timed"}, timeout=1.5)
    # The time it waited in all (it said "after 0.0s": what was left after the first long poll).
    assert re.search(r"is still (queued|running|waiting) after 1\.5s$", str(timed_out.value)), timed_out.value
    assert time.monotonic() - started >= 1.5


async def test_traverse_to_another_node_runs_once_across_a_pause(
    server: ServerProcess, spawn_worker: Callable[..., WorkerProcess], client: Client
) -> None:
    spawn_worker()
    spawn_worker("atfg_agents:helper_app")
    handle = await client.submit("tester.remote_child", {"x": 21})
    info = await reach(client, handle.id, "waiting")
    assert info.waiting_on is not None
    await client.decide_approval(info.waiting_on, "approved")
    assert await handle.result(timeout=15) == {"doubled": 42, "status": "approved", "attempt": 2}
    path = await handle.path()
    assert [(i.target, i.status, i.result) for i in path.items[1:]] == [("helper.double", "succeeded", 42)]
    # The child ran as its own traverser on the helper node, once: replay did not submit it again.
    children = [
        t for t in server.get("/traversers", status="succeeded")["items"] if t["target"] == "helper.double"
    ]
    assert len(children) == 1 and children[0]["version"] == "1.0.0"


async def test_a_waiting_client_rides_out_a_server_restart(
    server: ServerProcess, spawn_worker: Callable[..., WorkerProcess], client: Client
) -> None:
    spawn_worker()
    handle = await client.submit("tester.pausing", {"key": "restart"})
    info = await reach(client, handle.id, "waiting")
    waiting = asyncio.create_task(handle.result(timeout=40))
    await asyncio.sleep(0.2)
    server.kill()
    await asyncio.sleep(0.5)
    server.start()
    assert info.waiting_on is not None
    await client.decide_approval(info.waiting_on, "approved")  # on a fresh connection of the pool
    result = await waiting
    assert (result["attempt"], result["decision"]["status"]) == (2, "approved")
