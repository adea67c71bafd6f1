"""The hub's hint for claims that ride on reports: "no work" only after a claim found the node's
queue empty and no notification on the node came since (a notification during that claim wins)."""

from __future__ import annotations

from atfgraph.server._hub import Hub, node_key, traverser_key


def test_a_node_may_have_work_until_a_claim_finds_none() -> None:
    hub = Hub()
    key = node_key("n")
    assert hub.may_have_work(key)  # nothing known yet
    hub.found_nothing(key, hub.generation(key))
    assert not hub.may_have_work(key)
    hub.notify(key)  # something was queued (here, or on another server via wake)
    assert hub.may_have_work(key)


def test_a_notification_during_the_empty_claim_keeps_the_hint() -> None:
    hub = Hub()
    key = node_key("n")
    started = hub.generation(key)
    hub.wake(key)  # committed while the claim ran: it may not have seen it
    hub.found_nothing(key, started)
    assert hub.may_have_work(key)


def test_only_node_keys_are_counted() -> None:
    hub = Hub()
    hub.notify(traverser_key("t"))
    assert hub.generation(traverser_key("t")) == 0
    assert hub.generation(node_key("n")) == 0
