"""PostgreSQL only: transactions that make a run due NOTIFY, so listeners wake at once instead of
polling; transactions that make nothing due (or roll back) stay silent."""

from __future__ import annotations

import asyncio
import secrets
import threading

import pytest

from pyworkflow import HookAlreadyReceivedError
from pyworkflow.store import NewWait, PostgresStore, WaitKind

pytestmark = pytest.mark.postgres
T0 = 1_700_000_000.0


async def _woken(event: threading.Event, timeout: float) -> bool:
    return await asyncio.to_thread(event.wait, timeout)


async def test_notifications_wake_listeners(pg_store: PostgresStore) -> None:
    woken = threading.Event()
    unsubscribe = pg_store.subscribe(woken.set)
    assert await _woken(woken, 5)  # called once when listening starts
    woken.clear()

    # A new unleased run is work for someone: notified.
    await pg_store.create_run("a", "wf", b"{}", now=T0, lease_owner=None, lease_ttl=30)
    assert await _woken(woken, 5)
    woken.clear()

    # A turn that suspends without a wake-up makes nothing due: silent.
    claim = await pg_store.create_run("b", "wf", b"{}", now=T0, lease_owner="w", lease_ttl=30)
    assert claim is not None
    digest = secrets.token_bytes(32)
    wait = NewWait("w1", "k#1", WaitKind.HOOK, "k", "", digest, None, None)
    await pg_store.create_wait(claim.fence, wait, now=T0)
    await pg_store.suspend_run(claim.fence, notified=[], delivered={}, now=T0)
    assert not await _woken(woken, 0.5)

    # A decision wakes the run: notified at commit.
    await pg_store.resolve_wait(token_digest=digest, payload=b"1", now=T0 + 1)
    assert await _woken(woken, 5)
    woken.clear()

    # A refused decision rolls back: silent.
    with pytest.raises(HookAlreadyReceivedError):
        await pg_store.resolve_wait(token_digest=digest, payload=b"2", now=T0 + 2)
    assert not await _woken(woken, 0.5)

    unsubscribe()
    await pg_store.create_run("c", "wf", b"{}", now=T0, lease_owner=None, lease_ttl=30)
    assert not await _woken(woken, 0.5)
