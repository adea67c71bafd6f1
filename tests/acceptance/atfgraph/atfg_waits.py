"""Small waiting helpers shared by the acceptance tests (and the reliability suite's)."""

from __future__ import annotations

import asyncio
from collections.abc import Awaitable, Callable
from typing import Any

import httpx

from atfgraph import Client, TraverserInfo


async def reach(client: Client, traverser_id: str, status: str, seconds: float = 15.0) -> TraverserInfo:
    """Long-poll until the traverser is in ``status``; fail the test otherwise."""
    loop = asyncio.get_running_loop()
    deadline = loop.time() + seconds
    while True:
        info = await client.wait_for_status(traverser_id, status, max(0.0, deadline - loop.time()))
        if info.status == status:
            return info
        if (info.is_terminal and status != "terminal") or loop.time() >= deadline:
            raise AssertionError(f"{traverser_id} is {info.status} (error {info.error}), expected {status}")


async def only_approval(client: Client, traverser_id: str) -> dict[str, object]:
    pending = await client.list_approvals(traverser_id=traverser_id)
    assert len(pending) == 1, pending
    return pending[0]


async def carries_on_after(server: Any, fault: Callable[[], Awaitable[None]]) -> None:
    """A cycle across ``fault`` on a started graph server with its worker: a traverser paused
    on its approval, then ``fault`` (the database's connections ended, say), then the server
    ready at the first ask, the approval decided at the first try, the traverser finished, and
    a new one paused again; nothing in the server's log is a traceback."""
    async with Client(server.url, token=server.token()) as client:
        handle = await client.submit("tester.pausing", {"key": "before"})
        await reach(client, handle.id, "waiting", 15)
        approval_id = str((await only_approval(client, handle.id))["id"])
        await fault()
        async with httpx.AsyncClient(base_url=server.url, timeout=10) as http:
            statuses = [(await http.get("/readyz")).status_code for _ in range(3)]
        assert statuses == [200, 200, 200], statuses
        await client.decide_approval(approval_id, "approved")  # the first try
        result = await handle.result(timeout=20)
        assert result["decision"]["status"] == "approved" and result["attempt"] == 2
        second = await client.submit("tester.pausing", {"key": "after"})
        await reach(client, second.id, "waiting", 15)
    assert "Traceback" not in server.log.read_text(errors="replace")
