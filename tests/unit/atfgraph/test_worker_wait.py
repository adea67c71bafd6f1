"""The worker's "first of these to finish" wait (``atfgraph._worker._first``), as its claim loop
uses it: the claim is shielded (so that stopping can cancel it on its own terms), and the loop
reads the claim's outcome from the claim itself. A claim that failed (the server down or
restarting) must not also leave an exception nobody retrieves on the shield, which asyncio
logs at ERROR with a traceback ("Future exception was never retrieved") once per failed claim,
found by the graph server's crash-point trials (tests/reliability/graph_trials.py)."""

from __future__ import annotations

import asyncio
import gc
from typing import Any

import pytest

from atfgraph import ServerUnavailableError
from atfgraph._worker import _first


async def test_a_failed_shielded_claim_leaves_no_unretrieved_exception() -> None:
    loop = asyncio.get_running_loop()
    reported: list[dict[str, Any]] = []
    loop.set_exception_handler(lambda _loop, context: reported.append(context))

    async def claim() -> list[dict[str, Any]]:
        raise ServerUnavailableError("cannot talk to 127.0.0.1:1: [Errno 111] Connection refused")

    task = asyncio.create_task(claim())
    stopping = asyncio.Event()
    await _first(asyncio.shield(task), stopping.wait())
    with pytest.raises(ServerUnavailableError):
        task.result()  # the loop's own read of the outcome
    gc.collect()  # a future's unretrieved exception is reported when the future is collected
    await asyncio.sleep(0)
    assert [c["message"] for c in reported] == []


async def test_the_first_to_finish_ends_the_wait_and_the_others_are_cancelled() -> None:
    stopping = asyncio.Event()
    slow = asyncio.ensure_future(asyncio.sleep(30))
    loop = asyncio.get_running_loop()
    loop.call_later(0.01, stopping.set)
    await _first(slow, stopping.wait())
    await asyncio.sleep(0)  # the cancellation is delivered
    assert slow.cancelled()
