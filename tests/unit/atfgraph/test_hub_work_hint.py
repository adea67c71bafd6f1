"""The hub's count of queued work on a node: the tasks notified one by one and not yet claimed,
or an unknown number (nothing known yet, the sweeper, another server) until a claim finds the
queue short with nothing notified since it began. Claims that ride on reports skip their first
read when nothing may be queued, and a full claim wakes the next poll only when more may be."""

from __future__ import annotations

import asyncio

from atfgraph.server._hub import Hub, Listener, node_key, traverser_key


def _drained(hub: Hub, key: str) -> None:
    """A claim that asked for one and found nothing, with nothing notified while it ran."""
    hub.claimed(key, hub.generation(key), 1, 0)


def test_a_node_may_have_work_until_a_claim_finds_none() -> None:
    hub = Hub()
    key = node_key("n")
    assert hub.may_have_work(key)  # nothing known yet
    _drained(hub, key)
    assert not hub.may_have_work(key)
    hub.notify(key)  # something was queued (here, or on another server via wake)
    assert hub.may_have_work(key)


def test_a_notification_during_the_empty_claim_keeps_the_hint() -> None:
    hub = Hub()
    key = node_key("n")
    started = hub.generation(key)
    hub.wake(key)  # committed while the claim ran: it may not have seen it
    hub.claimed(key, started, 1, 0)
    assert hub.may_have_work(key)
    started = hub.generation(key)
    hub.wake(key, queued=1)
    hub.claimed(key, started, 1, 0)
    assert hub.may_have_work(key)


def test_tasks_notified_one_by_one_are_counted_down_by_claims() -> None:
    hub = Hub()
    key = node_key("n")
    _drained(hub, key)
    hub.notify(key, queued=1)
    hub.notify(key, queued=1)
    assert hub.may_have_work(key)
    hub.claimed(key, hub.generation(key), 1, 1)
    assert hub.may_have_work(key)  # one of the two is still queued
    hub.claimed(key, hub.generation(key), 1, 1)
    assert not hub.may_have_work(key)  # both taken: a report's claim need not read


def test_an_unknown_number_stays_unknown_until_a_claim_comes_back_short() -> None:
    hub = Hub()
    key = node_key("n")
    _drained(hub, key)
    hub.notify(key)  # the sweeper requeued some: how many is not said
    for _ in range(5):
        hub.claimed(key, hub.generation(key), 1, 1)
        assert hub.may_have_work(key)
    hub.claimed(key, hub.generation(key), 4, 2)  # fewer than asked: the queue was drained
    assert not hub.may_have_work(key)


async def _woken(hub: Hub, key: str, count: int) -> tuple[list[asyncio.Future[bool]], list[Listener]]:
    listeners = [hub.subscribe(key) for _ in range(count)]
    waits = [asyncio.ensure_future(hub.wait(x, 60.0)) for x in listeners]
    await asyncio.sleep(0.01)
    return waits, listeners


async def test_a_full_claim_of_the_one_notified_task_wakes_nobody_else() -> None:
    hub = Hub()
    key = node_key("n")
    _drained(hub, key)
    claiming = hub.subscribe(key)  # a poll busy claiming
    waits, _ = await _woken(hub, key, 2)  # two more polls waiting
    hub.notify(key, queued=1)
    await asyncio.sleep(0.01)
    assert [w.done() for w in waits] == [True, False]
    hub.take(claiming)
    hub.claimed(key, hub.generation(key), 1, 1)  # took it (say, the first woken found it gone)
    await asyncio.sleep(0.01)
    assert [w.done() for w in waits] == [True, False]  # the last one sleeps on: nothing is owed


async def test_a_full_claim_wakes_the_next_poll_while_more_is_owed_or_unknown() -> None:
    hub = Hub()
    key = node_key("n")
    _drained(hub, key)
    claiming = hub.subscribe(key)
    hub.notify(key, queued=1)
    hub.notify(key, queued=1)  # nobody else is listening yet: the busy poll has the first
    assert hub.take(claiming) == [None]
    waits, _ = await _woken(hub, key, 2)
    hub.claimed(key, hub.generation(key), 1, 1)  # one of two: the other is still queued
    await asyncio.sleep(0.01)
    assert [w.done() for w in waits] == [True, False]
    hub.notify(key)  # an unknown number: a full claim of one passes it on
    await asyncio.sleep(0.01)
    assert [w.done() for w in waits] == [True, True]
    late, *_ = await _woken(hub, key, 1)
    hub.claimed(key, hub.generation(key), 1, 1)
    await asyncio.sleep(0.01)
    assert late[0].done()


def test_only_node_keys_are_counted() -> None:
    hub = Hub()
    hub.notify(traverser_key("t"))
    assert hub.generation(traverser_key("t")) == 0
    assert hub.generation(node_key("n")) == 0
