"""The hub's long-poll waits: a notification ends one with True, its timeout with False, a
cancelled waiter is cancelled (and its timer with it), and a closing hub answers at once."""

from __future__ import annotations

import asyncio
import time

import pytest

from atfgraph.server._hub import Hub, node_key


async def test_a_notification_ends_the_wait_with_true() -> None:
    hub = Hub()
    fut = hub.subscribe(node_key("n"))
    asyncio.get_running_loop().call_later(0.02, hub.notify, node_key("n"))
    started = time.monotonic()
    assert await hub.wait(fut, 5.0) is True
    assert time.monotonic() - started < 1.0


async def test_the_timeout_ends_the_wait_with_false_and_a_later_notification_is_harmless() -> None:
    hub = Hub()
    key = node_key("n")
    fut = hub.subscribe(key)
    started = time.monotonic()
    assert await hub.wait(fut, 0.05) is False
    assert 0.04 <= time.monotonic() - started < 1.0
    hub.notify(key)  # the timed-out waiter is still subscribed: nothing breaks
    hub.unsubscribe(key, fut)
    assert await hub.wait(hub.subscribe(key), 0) is False  # no time: answers at once


async def test_a_cancelled_waiter_is_cancelled_and_leaves_no_timer() -> None:
    hub = Hub()
    fut = hub.subscribe(node_key("n"))
    waiter = asyncio.ensure_future(hub.wait(fut, 60.0))
    await asyncio.sleep(0.01)
    waiter.cancel()
    with pytest.raises(asyncio.CancelledError):
        await waiter
    loop = asyncio.get_running_loop()
    timers = [h for h in getattr(loop, "_scheduled", []) if not h.cancelled() and h.when() > loop.time() + 30]
    assert timers == []


async def test_closing_wakes_every_waiter_and_later_waits_answer_at_once() -> None:
    hub = Hub()
    futs = [hub.subscribe(node_key(f"n{k}")) for k in range(3)]
    waits = [asyncio.ensure_future(hub.wait(f, 60.0)) for f in futs]
    await asyncio.sleep(0.01)
    hub.close()
    assert await asyncio.wait_for(asyncio.gather(*waits), 1.0) == [True, True, True]
    assert await hub.wait(hub.subscribe(node_key("late")), 60.0) is False
