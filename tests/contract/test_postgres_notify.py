"""PostgreSQL only: transactions that make a run due NOTIFY, so listeners wake at once instead of
polling; transactions that make nothing due (or roll back) stay silent."""

from __future__ import annotations

import asyncio
import secrets
import threading
from typing import Any

import pytest

from pyworkflow import HookAlreadyReceivedError, HookExpiredError
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


async def test_a_decision_that_claims_its_run_wakes_nobody(pg_store: PostgresStore) -> None:
    """resolve_wait_and_claim takes the run it woke: no other runtime has work, so no NOTIFY.
    A run another turn holds, or a wait past its deadline, is work for someone: notified."""
    woken = threading.Event()
    unsubscribe = pg_store.subscribe(woken.set)
    try:
        assert await _woken(woken, 5)  # called once when listening starts
        woken.clear()

        async def parked(run_id: str, *, expires_at: float | None = None, suspend: bool = True) -> bytes:
            claim = await pg_store.create_run(run_id, "wf", b"{}", now=T0, lease_owner="w", lease_ttl=30)
            assert claim is not None
            digest = secrets.token_bytes(32)
            wait = NewWait(secrets.token_hex(4), "k#1", WaitKind.HOOK, "k", "", digest, expires_at, None)
            await pg_store.create_wait(claim.fence, wait, now=T0)
            if suspend:
                await pg_store.suspend_run(claim.fence, notified=[wait.id], delivered={}, now=T0)
            return digest

        def decide(digest: bytes, now: float) -> Any:
            return pg_store.resolve_wait_and_claim(
                token_digest=digest,
                payload=b"1",
                now=now,
                check=None,
                owner="me",
                lease_ttl=30,
                max_crashes=3,
            )

        free, held, late = (
            await parked("free"),
            await parked("held", suspend=False),
            await parked("late", expires_at=T0 + 5),
        )
        assert not await _woken(woken, 0.5)
        _, claim = await decide(free, T0 + 1)
        assert claim is not None and claim.fence.run_id == "free"
        assert not await _woken(woken, 0.5)  # claimed here: silent

        _, claim = await decide(held, T0 + 1)
        assert claim is None
        assert await _woken(woken, 5)  # left to the turn that holds it (and whoever comes after)
        woken.clear()

        with pytest.raises(HookExpiredError):
            await decide(late, T0 + 10)
        assert await _woken(woken, 5)  # the expiry woke the run: work for a runtime
    finally:
        unsubscribe()
