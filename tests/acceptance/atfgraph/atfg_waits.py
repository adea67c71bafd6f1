"""Small waiting helpers shared by the acceptance tests."""

from __future__ import annotations

import asyncio

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
