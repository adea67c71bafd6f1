"""The hub's long-poll waits: a notification ends one with True, its timeout with False; a
listener keeps what was notified while it was not waiting (nothing is lost between two waits)
and the status each notification said; a cancelled waiter leaves no timer; a closing hub wakes
everyone and answers later waits at once. Work queued for a node wakes one claim poll, which
passes it on when it leaves without taking it."""

from __future__ import annotations

import asyncio
import time

import pytest

from atfgraph.server import _hub
from atfgraph.server._hub import Hub, node_key, traverser_key


async def test_a_notification_ends_the_wait_with_true() -> None:
    hub = Hub()
    listener = hub.subscribe(node_key("n"))
    asyncio.get_running_loop().call_later(0.02, hub.notify, node_key("n"))
    started = time.monotonic()
    assert await hub.wait(listener, 5.0) is True
    assert time.monotonic() - started < 1.0
    assert hub.take(listener) == [None] and hub.take(listener) == []


async def test_the_timeout_ends_the_wait_with_false() -> None:
    hub = Hub()
    key = node_key("n")
    listener = hub.subscribe(key)
    started = time.monotonic()
    assert await hub.wait(listener, 0.05) is False
    assert 0.04 <= time.monotonic() - started < 1.0
    assert await hub.wait(listener, 0) is False  # no time: answers at once
    hub.unsubscribe(key, listener)
    hub.notify(key)  # after unsubscribing: not delivered
    assert hub.take(listener) == []


async def test_notifications_between_waits_are_kept_with_their_statuses() -> None:
    hub = Hub()
    key = traverser_key("t")
    listener = hub.subscribe(key)
    other = hub.subscribe(traverser_key("u"))
    hub.notify(key, "running")
    hub.notify(key, "waiting")
    hub.notify(key)  # a status not said (another server's notification)
    assert await hub.wait(listener, 5.0) is True  # already notified: at once
    assert hub.take(listener) == ["running", "waiting", None]
    assert hub.take(other) == []


async def test_a_listener_that_never_looks_keeps_a_bounded_list() -> None:
    hub = Hub()
    listener = hub.subscribe(traverser_key("t"))
    for _ in range(_hub._MAX_NOTIFIED * 3):
        hub.notify(traverser_key("t"), "running")
    notified = hub.take(listener)
    assert 1 <= len(notified) <= _hub._MAX_NOTIFIED and None in notified  # "something happened"


async def test_a_cancelled_waiter_is_cancelled_and_leaves_no_timer() -> None:
    hub = Hub()
    listener = hub.subscribe(node_key("n"))
    waiter = asyncio.ensure_future(hub.wait(listener, 60.0))
    await asyncio.sleep(0.01)
    waiter.cancel()
    with pytest.raises(asyncio.CancelledError):
        await waiter
    loop = asyncio.get_running_loop()
    timers = [h for h in getattr(loop, "_scheduled", []) if not h.cancelled() and h.when() > loop.time() + 30]
    assert timers == []
    hub.notify(node_key("n"))  # a notification after the cancellation is harmless
    assert hub.take(listener) == [None]


async def test_closing_wakes_every_waiter_and_later_waits_answer_at_once() -> None:
    hub = Hub()
    listeners = [hub.subscribe(node_key(f"n{k}")) for k in range(3)]
    waits = [asyncio.ensure_future(hub.wait(listener, 60.0)) for listener in listeners]
    await asyncio.sleep(0.01)
    hub.close()
    assert await asyncio.wait_for(asyncio.gather(*waits), 1.0) == [True, True, True]
    assert await hub.wait(hub.subscribe(node_key("late")), 60.0) is False


async def test_work_for_a_node_wakes_one_claim_poll_and_is_passed_on() -> None:
    hub = Hub()
    key = node_key("n")
    first, second, third = (hub.subscribe(key) for _ in range(3))
    waits = [asyncio.ensure_future(hub.wait(x, 60.0)) for x in (first, second, third)]
    await asyncio.sleep(0.01)
    hub.notify(key)
    await asyncio.sleep(0.01)
    assert [w.done() for w in waits] == [True, False, False]  # the one waiting longest
    assert hub.generation(key) == 1
    # Its claim took a full batch: more may be queued, the next poll is woken.
    hub.take(first)
    hub.pass_on(key)
    await asyncio.sleep(0.01)
    assert [w.done() for w in waits] == [True, True, False]
    # A poll that leaves with a notification it did not take passes it on.
    hub.unsubscribe(key, second)
    await asyncio.sleep(0.01)
    assert waits[2].done() and hub.take(third) == [None]
    # Passed on with nobody left to take it: nothing happens, nothing is counted.
    hub.unsubscribe(key, first)
    hub.unsubscribe(key, third)
    hub.pass_on(key)
    assert hub.generation(key) == 1


async def test_a_waiting_poll_is_woken_before_a_busy_one() -> None:
    hub = Hub()
    key = node_key("n")
    busy, idle = hub.subscribe(key), hub.subscribe(key)  # busy: claiming, not in wait()
    waiting = asyncio.ensure_future(hub.wait(idle, 60.0))
    await asyncio.sleep(0.01)
    hub.notify(key)
    await asyncio.sleep(0.01)
    assert waiting.done() and hub.take(busy) == []
    hub.notify(key)  # the waiting one already has something: the busy one gets this
    assert hub.take(busy) == [None]
    hub.notify(key)  # both have something: they will claim anyway
    assert hub.take(idle) == [None]


async def test_a_traverser_notification_wakes_every_follower() -> None:
    hub = Hub()
    key = traverser_key("t")
    followers = [hub.subscribe(key) for _ in range(3)]
    waits = [asyncio.ensure_future(hub.wait(x, 60.0)) for x in followers]
    await asyncio.sleep(0.01)
    hub.notify(key, "succeeded")
    assert await asyncio.wait_for(asyncio.gather(*waits), 1.0) == [True, True, True]
    assert [hub.take(x) for x in followers] == [["succeeded"]] * 3
    hub.unsubscribe(key, followers[0])  # nothing is passed on for a traverser
    assert hub.take(followers[1]) == []
