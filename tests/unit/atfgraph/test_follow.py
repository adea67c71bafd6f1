"""A traverser's long poll (``_follow``, behind ``GET /traversers/{id}?wait_for=`` and
submit-and-follow) on a real store and hub: it skips the read for a notification whose status
it does not want, and still answers the traverser as it is now, never a view it skipped past."""

from __future__ import annotations

import asyncio
import json
from types import SimpleNamespace
from typing import Any

import pytest

from atfgraph.server import _routes
from atfgraph.server._hub import Hub, traverser_key
from atfgraph.server._store import GraphStore
from counted import counted_calls


class _Clock:
    """``time.monotonic`` for ``_routes``: the poll's deadline is set at ``now`` = 0; a test
    moves ``now`` past it."""

    def __init__(self) -> None:
        self.now = 0.0

    def monotonic(self) -> float:
        return self.now


def _request(store: GraphStore, hub: Hub) -> Any:
    return SimpleNamespace(app=SimpleNamespace(state=SimpleNamespace(store=store, hub=hub)))


async def _queued(store: GraphStore, monkeypatch: pytest.MonkeyPatch) -> tuple[str, str, list[str]]:
    """A queued traverser and a worker of its node: (traverser id, worker id, the traverser
    reads made through the store from now on)."""
    worker = (await store.register_worker("n", "1", 1))["id"]
    view, _ = await store.submit("n.skill", b"{}", max_attempts=1)
    return str(view["id"]), str(worker), counted_calls(monkeypatch, store, "read_traverser")


async def test_a_skipped_wake_up_is_not_the_answer_at_the_deadline(
    store: GraphStore, monkeypatch: pytest.MonkeyPatch
) -> None:
    clock = _Clock()
    monkeypatch.setattr(_routes, "time", clock)
    hub = Hub()
    traverser_id, worker, reads = await _queued(store, monkeypatch)
    follow = asyncio.ensure_future(
        _routes._follow(_request(store, hub), traverser_id, {"succeeded"}, 10.0, 200)
    )
    await asyncio.sleep(0.05)  # it read "queued" and waits
    assert reads == [traverser_id]
    (task,) = await store.claim(worker, 1)
    assert task["traverser"]["status"] == "running"
    clock.now = 100.0  # the deadline passes as the claim is announced
    hub.notify(traverser_key(traverser_id), "running")
    answer = json.loads((await asyncio.wait_for(follow, 5)).body)
    assert answer["status"] == "running"  # read again at the deadline, not the skipped "queued"


async def test_a_wake_up_with_an_unwanted_status_reads_nothing_and_a_wanted_one_answers(
    store: GraphStore, monkeypatch: pytest.MonkeyPatch
) -> None:
    hub = Hub()
    traverser_id, worker, reads = await _queued(store, monkeypatch)
    follow = asyncio.ensure_future(
        _routes._follow(_request(store, hub), traverser_id, {"running", "succeeded"}, 10.0, 200)
    )
    await asyncio.sleep(0.05)
    hub.notify(traverser_key(traverser_id), "waiting")  # said, and not wanted: no read
    await asyncio.sleep(0.05)
    assert reads == [traverser_id] and not follow.done()
    await store.claim(worker, 1)
    hub.notify(traverser_key(traverser_id), "running")  # wanted: read, and the answer
    answer = json.loads((await asyncio.wait_for(follow, 5)).body)
    assert answer["status"] == "running" and len(reads) == 2


async def test_a_notification_that_says_nothing_always_reads(
    store: GraphStore, monkeypatch: pytest.MonkeyPatch
) -> None:
    hub = Hub()
    traverser_id, worker, reads = await _queued(store, monkeypatch)
    follow = asyncio.ensure_future(
        _routes._follow(_request(store, hub), traverser_id, {"running"}, 10.0, 200)
    )
    await asyncio.sleep(0.05)
    await store.claim(worker, 1)
    hub.notify(traverser_key(traverser_id))  # another server's, or a transition that does not say
    answer = json.loads((await asyncio.wait_for(follow, 5)).body)
    assert answer["status"] == "running" and len(reads) == 2


def _post(state: Any, body: dict[str, Any]) -> Any:
    """A real request to a route function: ``body`` as its JSON, ``state`` as the app's."""
    from starlette.requests import Request

    raw = json.dumps(body).encode()
    sent = False

    async def receive() -> dict[str, Any]:
        nonlocal sent
        if sent:
            await asyncio.sleep(3600)  # the client is still there
        sent = True
        return {"type": "http.request", "body": raw, "more_body": False}

    scope = {
        "type": "http",
        "method": "POST",
        "path": "/api/v2/traversers",
        "headers": [(b"content-type", b"application/json"), (b"content-length", str(len(raw)).encode())],
        "app": SimpleNamespace(state=state),
    }
    return Request(scope, receive)


async def test_submit_and_follow_answers_from_the_submission_without_reading_it_first(
    service: Any, monkeypatch: pytest.MonkeyPatch
) -> None:
    """Submit-and-follow listens on the new traverser's id before its submission commits, so the
    submission's own answer is its first view: the reads of a cycle's submit-and-follow went from
    two (the first and the wanted status's) to one. A repeated idempotency key follows the
    earlier traverser and reads it first, as ``GET`` does."""
    from atfgraph.server._identity import Principal, Role

    store, hub = service.store, service.hub
    state = SimpleNamespace(store=store, hub=hub, service=service)
    owner = Principal("t-owner", "olga", Role.OWNER)
    worker = (await store.register_worker("n", "1", 1))["id"]
    reads = counted_calls(monkeypatch, store, "read_traverser")
    body = {"target": "n.skill", "wait_for": "running", "wait_seconds": 10, "idempotency_key": "k1"}
    follow = asyncio.ensure_future(_routes.submit(_post(state, body), owner))
    await asyncio.sleep(0.05)
    assert reads == [] and not follow.done()  # queued, as submitted: nothing read
    (task,) = await store.claim(worker, 1)
    hub.notify(traverser_key(task["traverser"]["id"]), "running")
    answer = await asyncio.wait_for(follow, 5)
    view = json.loads(answer.body)
    assert answer.status_code == 201 and view["status"] == "running"
    assert reads == [view["id"]]  # the wanted status's read only
    # Nothing notified until the deadline: read then, as a GET's poll does (a wake-up from
    # another server may have been lost), and answered as it is.
    quick = {"target": "n.skill", "wait_for": "succeeded", "wait_seconds": 0.05}
    answer = await asyncio.wait_for(_routes.submit(_post(state, quick), owner), 5)
    late = json.loads(answer.body)
    assert late["status"] == "queued" and answer.status_code == 201
    assert reads == [view["id"], late["id"]]
    # The same key again: the earlier traverser, read afresh (it is running now), 200.
    again = await asyncio.wait_for(_routes.submit(_post(state, {**body, "wait_seconds": 1}), owner), 5)
    assert again.status_code == 200
    assert json.loads(again.body)["id"] == view["id"] and json.loads(again.body)["status"] == "running"
    assert reads == [view["id"], late["id"], view["id"]]
    assert not hub._waiters  # every listener let go, the unused id's included
