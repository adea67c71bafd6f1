"""What the Celery sweeper publishes from (``PostgresStore.ready_runs``): each due queue row as
(run, epoch, due time), so two wake-ups of one run are two rows to publish, and the same stale
row is the same one each time it is read; and how many there are (``count_ready``)."""

from __future__ import annotations

import secrets

from pyworkflow.store import NewWait, PostgresStore, WaitKind

T0 = 1_700_000_000.0
TTL = 30.0


def _timer(expires_at: float) -> NewWait:
    return NewWait(
        secrets.token_hex(8), f"timer#{expires_at}", WaitKind.TIMER, "sleep", "", None, expires_at, None
    )


async def test_each_wake_up_of_a_run_is_its_own_ready_row(pg_store: PostgresStore) -> None:
    run_id = secrets.token_hex(8)
    await pg_store.create_run(run_id, "wf", b'{"args":[]}', now=T0, lease_owner=None, lease_ttl=TTL)
    first = await pg_store.ready_runs(now=T0 + 1)
    assert first == [(run_id, 0, T0)]
    assert await pg_store.ready_runs(now=T0 + 2) == first  # the same row, read again
    keys = [first[0]]
    now = T0 + 1
    for _ in range(2):  # sleep(1); sleep(1): two expiries, each a new wake-up
        claim = await pg_store.claim_run(run_id, "w", now=now, lease_ttl=TTL, max_crashes=3)
        assert claim is not None
        await pg_store.create_wait(claim.fence, _timer(now + 1), now=now)
        await pg_store.suspend_run(claim.fence, notified=[], delivered={}, now=now)
        assert await pg_store.ready_runs(now=now) == []  # suspended: nothing to publish
        now += 1
        assert await pg_store.expire_due_waits(now=now) == 1
        [woken] = await pg_store.ready_runs(now=now, due_before=now, due_after=now)
        assert woken[0] == run_id and woken[2] == now
        keys.append(woken)
    assert len(set(keys)) == 3  # three wake-ups, three rows: none looks like one already published


async def test_ready_rows_are_the_earliest_due_and_the_runs_out_leases(pg_store: PostgresStore) -> None:
    """Unleased rows due in the window and rows whose lease ran out, by due time, at most
    ``limit``; neither a row due later nor a live lease."""

    async def run(at: float, owner: str | None = None) -> str:
        run_id = secrets.token_hex(8)
        await pg_store.create_run(run_id, "wf", b'{"args":[]}', now=at, lease_owner=owner, lease_ttl=TTL)
        return run_id

    due = [await run(T0 + i) for i in (3, 1, 2)]
    lost = await run(T0 - 40, owner="dead")  # its lease ran out at T0 - 10
    await run(T0 + 4, owner="alive")  # leased until T0 + 34
    await run(T0 + 20)  # due after the window
    now = T0 + 10
    ready = await pg_store.ready_runs(now=now)
    assert [r[0] for r in ready] == [lost, due[1], due[2], due[0]]
    assert [r[2] for r in ready] == [T0 - 40, T0 + 1, T0 + 2, T0 + 3]
    assert [r[0] for r in await pg_store.ready_runs(now=now, limit=2)] == [lost, due[1]]
    assert [r[0] for r in await pg_store.ready_runs(now=now, due_before=T0 + 2, due_after=T0 + 2)] == [
        lost,
        due[2],
    ]
    # The same rows counted (the sweeper weighs them against its broker's queue), up to a limit.
    assert await pg_store.count_ready(now=now, limit=100) == 4
    assert await pg_store.count_ready(now=now, limit=3) == 3
    assert await pg_store.count_ready(now=now, limit=0) == 0
    assert await pg_store.count_ready(now=T0 + 2, limit=100) == 3  # the lapsed lease, T0 + 1, T0 + 2


async def test_the_next_wake_is_the_next_due_time_and_the_earliest_pending_deadline(
    pg_store: PostgresStore,
) -> None:
    """``next_wake``: the sweeper's wake-up in one read, the store's ``next_due`` (the earliest of
    deadlines, queue rows and leases) and the earliest deadline alone, apart from the queue's due
    rows; an expired wait's deadline no longer counts."""
    assert await pg_store.next_wake() == (None, None)
    for expires_at in (T0 + 50, T0 + 20):
        run_id = secrets.token_hex(8)
        claim = await pg_store.create_run(
            run_id, "wf", b'{"args":[]}', now=T0, lease_owner="w", lease_ttl=TTL
        )
        assert claim is not None
        await pg_store.create_wait(claim.fence, _timer(expires_at), now=T0)
        await pg_store.suspend_run(claim.fence, notified=[], delivered={}, now=T0)
    assert await pg_store.next_wake() == (T0 + 20, T0 + 20)
    backlog = secrets.token_hex(8)
    await pg_store.create_run(backlog, "wf", b'{"args":[]}', now=T0 - 5, lease_owner=None, lease_ttl=TTL)
    # The queued run is due before any deadline; the deadline is read apart from it.
    assert await pg_store.next_wake() == (T0 - 5, T0 + 20)
    assert await pg_store.next_due() == T0 - 5
    assert await pg_store.expire_due_waits(now=T0 + 20) == 1
    assert await pg_store.next_wake() == (T0 - 5, T0 + 50)
