"""The hub's count of queued work on a node: the tasks notified one by one and not yet claimed,
or an unknown number (nothing known yet, the sweeper, another server) until a claim finds the
queue short with nothing notified since it began. Idle claim polls are woken while more tasks are
owed than polls are woken or claiming already, and a claim riding on a report skips its first
read when every owed task has a poll on its way."""

from __future__ import annotations

import asyncio

from atfgraph.server._hub import Hub, Listener, node_key, traverser_key


def _drained(hub: Hub, key: str) -> None:
    """A claim that asked for one and found nothing, with nothing notified while it ran."""
    claiming = hub.subscribe(key)
    hub.claimed(key, claiming, hub.generation(key), 1, 0)
    hub.unsubscribe(key, claiming)


def _took(hub: Hub, key: str, count: int = 1, asked: int = 1) -> None:
    """A claim (its poll busy until now, then gone) that took ``count`` tasks."""
    claiming = hub.subscribe(key)
    hub.take(claiming)
    hub.claimed(key, claiming, hub.generation(key), asked, count)
    hub.unsubscribe(key, claiming)


async def _idle(hub: Hub, key: str, count: int) -> tuple[list[asyncio.Future[bool]], list[Listener]]:
    """``count`` polls waiting on ``key``, oldest first."""
    listeners = [hub.subscribe(key) for _ in range(count)]
    waits = [asyncio.ensure_future(hub.wait(x, 60.0)) for x in listeners]
    await asyncio.sleep(0.01)
    return waits, listeners


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
    for queued in (None, 1):
        claiming = hub.subscribe(key)
        started = hub.generation(key)
        hub.wake(key, queued=queued)  # committed while the claim ran: it may not have seen it
        hub.claimed(key, claiming, started, 1, 0)
        hub.unsubscribe(key, claiming)
        assert hub.may_have_work(key)


def test_tasks_notified_one_by_one_are_counted_down_by_claims() -> None:
    hub = Hub()
    key = node_key("n")
    _drained(hub, key)
    hub.notify(key, queued=1)
    hub.notify(key, queued=1)
    assert hub.may_have_work(key)
    _took(hub, key)
    assert hub.may_have_work(key)  # one of the two is still queued
    _took(hub, key)
    assert not hub.may_have_work(key)  # both taken: a report's claim need not read


def test_an_unknown_number_stays_unknown_until_a_claim_comes_back_short() -> None:
    hub = Hub()
    key = node_key("n")
    _drained(hub, key)
    hub.notify(key)  # the sweeper requeued some: how many is not said
    for _ in range(5):
        _took(hub, key)
        assert hub.may_have_work(key)
    _took(hub, key, count=2, asked=4)  # fewer than asked: the queue was drained
    assert not hub.may_have_work(key)


async def test_each_task_notified_wakes_one_idle_poll_and_no_more() -> None:
    hub = Hub()
    key = node_key("n")
    _drained(hub, key)
    waits, listeners = await _idle(hub, key, 3)
    hub.notify(key, queued=1)
    await asyncio.sleep(0.01)
    assert [w.done() for w in waits] == [True, False, False]  # the one waiting longest
    # The woken poll claims it: nothing more is owed, nobody else is woken.
    hub.take(listeners[0])
    hub.claimed(key, listeners[0], hub.generation(key), 1, 1)
    hub.unsubscribe(key, listeners[0])
    await asyncio.sleep(0.01)
    assert [w.done() for w in waits] == [True, False, False]
    assert not hub.may_have_work(key)


async def _one_task_one_busy_poll(hub: Hub, key: str) -> tuple[Listener, asyncio.Future[bool]]:
    """A poll busy claiming, one idle, then one task notified: the idle one sleeps on."""
    _drained(hub, key)
    busy = hub.subscribe(key)  # busy claiming: it may take what is queued next
    waits, _ = await _idle(hub, key, 1)
    hub.notify(key, queued=1)
    await asyncio.sleep(0.01)
    assert not waits[0].done()  # one task, one poll on its way
    return busy, waits[0]


async def test_a_task_taken_by_a_poll_already_claiming_wakes_nobody() -> None:
    hub = Hub()
    key = node_key("n")
    claiming, idle = await _one_task_one_busy_poll(hub, key)
    assert not hub.may_have_work(key)  # nor does a report's claim read for it
    # The busy claim came back without it (it read before the commit): the idle poll is woken.
    hub.claimed(key, claiming, hub.generation(key) - 1, 1, 0)
    await asyncio.sleep(0.01)
    assert idle.done()


async def test_a_poll_counted_on_its_way_that_leaves_without_claiming_hands_on() -> None:
    hub = Hub()
    key = node_key("n")
    busy, idle = await _one_task_one_busy_poll(hub, key)  # say, a claim whose client went away
    hub.unsubscribe(key, busy)
    await asyncio.sleep(0.01)
    assert idle.done()


async def test_more_owed_than_polls_on_their_way_wakes_as_many_as_owed() -> None:
    hub = Hub()
    key = node_key("n")
    _drained(hub, key)
    claiming = hub.subscribe(key)
    hub.notify(key, queued=1)
    hub.notify(key, queued=1)  # nobody idle yet: one poll busy, two tasks owed
    waits, _ = await _idle(hub, key, 3)
    hub.take(claiming)
    hub.claimed(key, claiming, hub.generation(key), 1, 1)  # one of two: the other is still owed
    await asyncio.sleep(0.01)
    assert [w.done() for w in waits] == [True, False, False]


async def test_an_unknown_number_passes_a_full_claim_on() -> None:
    hub = Hub()
    key = node_key("n")
    claiming = hub.subscribe(key)
    hub.notify(key)  # an unknown number: wakes one (here, the busy poll)
    waits, _ = await _idle(hub, key, 2)
    assert hub.take(claiming) == [None]
    hub.claimed(key, claiming, hub.generation(key), 1, 1)  # full: more may be queued
    await asyncio.sleep(0.01)
    assert [w.done() for w in waits] == [True, False]


def test_only_node_keys_are_counted() -> None:
    hub = Hub()
    hub.notify(traverser_key("t"))
    assert hub.generation(traverser_key("t")) == 0
    assert hub.generation(node_key("n")) == 0


async def test_a_task_goes_to_a_report_waiting_for_one_before_an_older_poll() -> None:
    """A claim that rides on a report ends its request either way; a worker's own poll woken for
    the task would have to be sent again. Counted or not, the ride is woken first."""
    for counted in (True, False):
        hub = Hub()
        key = node_key("n")
        if counted:
            _drained(hub, key)
        (poll_wait,), (poll,) = await _idle(hub, key, 1)
        ride = hub.subscribe(key, ride=True)
        ride_wait = asyncio.ensure_future(hub.wait(ride, 60.0))
        await asyncio.sleep(0.01)
        hub.notify(key, queued=1 if counted else None)
        await asyncio.sleep(0.01)
        assert ride_wait.done() and not poll_wait.done(), counted
        hub.notify(key, queued=1 if counted else None)  # the ride is busy: the poll is next
        await asyncio.sleep(0.01)
        assert poll_wait.done(), counted
        for listener in (poll, ride):
            hub.unsubscribe(key, listener)


async def _polls_of(hub: Hub, key: str, *versions: str) -> list[tuple[Listener, asyncio.Future[bool]]]:
    """Idle polls on ``key`` by workers of ``versions``, oldest first."""
    polls = []
    for version in versions:
        listener = hub.subscribe(key, version=version)
        polls.append((listener, asyncio.ensure_future(hub.wait(listener, 60.0))))
    await asyncio.sleep(0.01)
    return polls


def _short(hub: Hub, key: str, listener: Listener) -> None:
    """``listener``'s claim asked for one and got none, nothing notified while it ran."""
    hub.take(listener)
    hub.claimed(key, listener, hub.generation(key), 1, 0)


async def test_a_short_claim_of_one_version_wakes_a_poll_of_another() -> None:
    """A rolling upgrade: a decision queues a traverser pinned to v1, the longest-waiting poll is
    v2's, whose claim cannot take it. Before, that short claim counted the queue as drained and
    v1's poll slept on (until its 5 s re-read)."""
    hub = Hub()
    key = node_key("n")
    _drained(hub, key)
    (v2, v2_wait), (v1, v1_wait) = await _polls_of(hub, key, "v2", "v1")
    hub.notify(key, queued=1)
    await asyncio.sleep(0.01)
    assert v2_wait.done() and not v1_wait.done()
    _short(hub, key, v2)
    await asyncio.sleep(0.01)
    assert v1_wait.done()  # v1's poll looks
    assert hub.may_have_work(key)  # and a report's claim of either version reads
    hub.take(v1)
    hub.claimed(key, v1, hub.generation(key), 1, 1)
    for listener in (v1, v2):
        hub.unsubscribe(key, listener)


async def test_the_queue_counts_as_drained_once_every_version_polling_came_back_short() -> None:
    hub = Hub()
    key = node_key("n")
    (v1, v1_wait), (v2, v2_wait), (v1b, v1b_wait) = await _polls_of(hub, key, "v1", "v2", "v1")
    hub.notify(key)  # an unknown number: wakes the longest waiting
    await asyncio.sleep(0.01)
    assert v1_wait.done() and not v2_wait.done()
    _short(hub, key, v1)  # v2's polls may still find work pinned to v2
    await asyncio.sleep(0.01)
    assert hub.may_have_work(key) and v2_wait.done() and not v1b_wait.done()  # v2's, not v1's
    _short(hub, key, v2)  # v2 came back short at the same generation: nothing for anyone
    assert not hub.may_have_work(key, v1b) and not hub.may_have_work(key, v2)
    assert not hub.may_have_work(key, version="v1")
    # A version whose claims showed nothing (it was not polling) may have work pinned to it.
    assert hub.may_have_work(key, version="v3")
    await asyncio.sleep(0.01)
    assert not v1b_wait.done()
    for listener in (v1, v2, v1b):
        hub.unsubscribe(key, listener)


async def test_short_claims_of_two_versions_do_not_wake_each_other_in_turn() -> None:
    hub = Hub()
    key = node_key("n")
    _drained(hub, key)
    (a, _), (b, _) = await _polls_of(hub, key, "v1", "v2")
    hub.notify(key)  # an unknown number: wakes one
    hub.take(a)
    hub.take(b)
    _short(hub, key, a)
    _short(hub, key, b)
    ((late, late_wait),) = await _polls_of(hub, key, "v1")
    _short(hub, key, a)  # a second short claim of v1 at the same generation
    await asyncio.sleep(0.01)
    assert not late_wait.done() and not hub.may_have_work(key, late)
    for listener in (a, b, late):
        hub.unsubscribe(key, listener)
