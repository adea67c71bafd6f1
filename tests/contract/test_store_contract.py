"""The contract every :class:`pyworkflow.store.Store` backend keeps. The same tests run on SQLite
(default) and PostgreSQL (``PYWORKFLOW_TEST_STORE=postgresql``) through the ``store_url`` fixture."""

from __future__ import annotations

import asyncio
import os
import secrets
from collections.abc import Iterator

import orjson
import pytest

from pyworkflow import (
    CancellationError,
    CheckpointConflictError,
    HookAlreadyReceivedError,
    HookCancelledError,
    HookExpiredError,
    HookNotFoundError,
    LeaseLostError,
    StepAlreadyCompletedError,
    WorkflowNotFoundError,
)
from pyworkflow.store import (
    Claim,
    NewWait,
    RunState,
    RunStatus,
    StepStatus,
    Store,
    WaitKind,
    WaitStatus,
    open_store,
)

T0 = 1_700_000_000.0
TTL = 30.0


@pytest.fixture
def store(store_url: str) -> Iterator[Store]:
    s = open_store(store_url)
    try:
        yield s
    finally:
        s.close()


def _id() -> str:
    return secrets.token_hex(8)


def _wait(key: str = "s#1/step_hook:approve#1", *, expires_at: float | None = None,
          kind: WaitKind = WaitKind.STEP_HOOK, token: bytes | None = None) -> NewWait:  # fmt: skip
    return NewWait(
        id=_id(),
        wait_key=key,
        kind=kind,
        name="approve",
        step_key="s#1",
        token_digest=token if token is not None else secrets.token_bytes(32),
        expires_at=expires_at,
        payload_schema=None,
    )


async def _started(store: Store, *, now: float = T0, workflow: str = "wf") -> Claim:
    """A run created and leased at once, as the local runtime's ``submit`` does."""
    claim = await store.create_run(_id(), workflow, b'{"args":[]}', now=now, lease_owner="w1", lease_ttl=TTL)
    assert claim is not None
    return claim


async def _suspended_on(store: Store, wait: NewWait, *, now: float = T0) -> tuple[Claim, str]:
    claim = await _started(store, now=now)
    await store.create_wait(claim.fence, wait, now=now)
    await store.suspend_run(claim.fence, notified=[wait.id], delivered={}, now=now)
    return claim, claim.fence.run_id


# -- create, claim, fence ----------------------------------------------------------------------


async def test_create_unleased_is_claimed_once(store: Store) -> None:
    run_id = _id()
    assert await store.create_run(run_id, "wf", b"{}", now=T0, lease_owner=None, lease_ttl=TTL) is None
    run = await store.get_run(run_id)
    assert run is not None and run.status == RunStatus.PENDING and run.input == b"{}"
    assert await store.has_ready(now=T0)
    claims = await store.claim("w1", limit=10, now=T0, lease_ttl=TTL, max_crashes=3)
    assert [c.fence.run_id for c in claims] == [run_id]
    assert claims[0].fence.epoch == 1 and claims[0].resumed is False and claims[0].workflow == "wf"
    assert (await store.get_run(run_id)).status == RunStatus.RUNNING  # type: ignore[union-attr]
    assert not await store.has_ready(now=T0)
    assert await store.claim("w2", limit=10, now=T0 + 1, lease_ttl=TTL, max_crashes=3) == []


async def test_create_leased_returns_claim(store: Store) -> None:
    claim = await _started(store)
    assert claim.fence.epoch == 1 and claim.resumed is False
    assert not await store.has_ready(now=T0)
    assert await store.lease_owners(now=T0) == ["w1"]
    run = await store.get_run(claim.fence.run_id)
    assert run is not None and run.status == RunStatus.RUNNING


async def test_claim_respects_limit_and_due_time(store: Store) -> None:
    for _ in range(3):
        await store.create_run(_id(), "wf", b"{}", now=T0 + 10, lease_owner=None, lease_ttl=TTL)
    assert await store.claim("w1", limit=5, now=T0, lease_ttl=TTL, max_crashes=3) == []
    assert len(await store.claim("w1", limit=2, now=T0 + 10, lease_ttl=TTL, max_crashes=3)) == 2
    assert len(await store.claim("w1", limit=2, now=T0 + 10, lease_ttl=TTL, max_crashes=3)) == 1


async def test_a_first_turn_reads_the_same_whoever_claims_it(store: Store) -> None:
    """A pending run's first claim (a poll's, a Celery turn's) writes no event, as a run its
    starting process leased itself has none: both histories start with run_created alone. The
    claim of a suspended run writes run_resumed."""
    leased = await _started(store)
    queued = _id()
    await store.create_run(queued, "wf", b"{}", now=T0, lease_owner=None, lease_ttl=TTL)
    [claim] = await store.claim("w1", limit=1, now=T0, lease_ttl=TTL, max_crashes=3)
    assert claim.fence.run_id == queued and claim.resumed is False
    for run_id in (leased.fence.run_id, queued):
        assert [e.type for e in await store.get_events(run_id)] == ["run_created"]
    wait = _wait()
    await store.create_wait(claim.fence, wait, now=T0)
    await store.suspend_run(claim.fence, notified=[wait.id], delivered={}, now=T0)
    await store.resolve_wait(wait_id=wait.id, payload=b"1", now=T0 + 1)
    [again] = await store.claim("w1", limit=1, now=T0 + 1, lease_ttl=TTL, max_crashes=3)
    assert again.fence.run_id == queued and again.resumed is True
    types = [e.type for e in await store.get_events(queued)]
    assert types == ["run_created", "wait_created", "run_suspended", "wait_received", "run_resumed"]


async def test_stale_epoch_is_refused_after_lease_lost(store: Store) -> None:
    old = await _started(store)
    # The lease runs out (the worker died or stalled); another worker claims the run.
    later = T0 + TTL + 1
    [new] = await store.claim("w2", limit=1, now=later, lease_ttl=TTL, max_crashes=3)
    assert new.fence.run_id == old.fence.run_id and new.fence.epoch == old.fence.epoch + 1
    assert new.resumed is True
    with pytest.raises(LeaseLostError):
        await store.complete_step(old.fence, "a#1", b"1", now=later)
    with pytest.raises(LeaseLostError):
        await store.save_checkpoint(old.fence, "a#1", "", b"{}", expected_revision=0, now=later)
    with pytest.raises(LeaseLostError):
        await store.create_wait(old.fence, _wait(), now=later)
    with pytest.raises(LeaseLostError):
        await store.suspend_run(old.fence, notified=[], delivered={}, now=later)
    with pytest.raises(LeaseLostError):
        await store.complete_run(old.fence, b"1", now=later)
    # Nothing the stale turn tried was recorded; the new owner writes normally.
    assert (await store.load_state(new.fence.run_id)).steps == {}
    await store.complete_step(new.fence, "a#1", b"1", now=later)
    await store.complete_run(new.fence, b'"done"', now=later)
    run = await store.get_run(new.fence.run_id)
    assert run is not None and run.status == RunStatus.COMPLETED and run.result == b'"done"'
    types = [e.type for e in await store.get_events(new.fence.run_id)]
    assert types == ["run_created", "run_recovered", "step_completed", "run_completed"]


async def test_heartbeat_keeps_the_lease(store: Store) -> None:
    claim = await _started(store)
    assert await store.heartbeat("w1", lease_expires_at=T0 + 3 * TTL) == 1
    assert await store.claim("w2", limit=1, now=T0 + 2 * TTL, lease_ttl=TTL, max_crashes=3) == []
    assert await store.heartbeat("nobody", lease_expires_at=T0 + 3 * TTL) == 0
    # A known-dead owner's lease is freed at once.
    assert await store.expire_leases_of(["w1"], now=T0 + 1) == 1
    [again] = await store.claim("w2", limit=1, now=T0 + 1, lease_ttl=TTL, max_crashes=3)
    assert again.fence.run_id == claim.fence.run_id and again.fence.epoch == 2


async def test_release_makes_the_run_claimable_at_once(store: Store) -> None:
    claim = await _started(store)
    await store.release(claim.fence, now=T0 + 1)
    assert await store.has_ready(now=T0 + 1)
    [again] = await store.claim("w2", limit=1, now=T0 + 1, lease_ttl=TTL, max_crashes=1)
    assert again.fence.epoch == 2
    # A release is not a crash: no crash was counted, so max_crashes=1 still allows a real one.
    [third] = await store.claim("w3", limit=1, now=T0 + 2 + TTL, lease_ttl=TTL, max_crashes=1)
    assert third.fence.epoch == 3
    # A stale release changes nothing.
    await store.release(claim.fence, now=T0 + 3 + TTL)
    assert not await store.has_ready(now=T0 + 3 + TTL)


# -- steps -------------------------------------------------------------------------------------


async def test_step_completion_is_refused_twice(store: Store) -> None:
    claim = await _started(store)
    await store.complete_step(claim.fence, "a#1", b'{"v":1}', now=T0)
    with pytest.raises(StepAlreadyCompletedError):
        await store.complete_step(claim.fence, "a#1", b'{"v":2}', now=T0)
    with pytest.raises(StepAlreadyCompletedError):
        await store.fail_step(claim.fence, "a#1", attempt=1, error=b"{}", retry=None, delivered=0, now=T0)
    state = await store.load_state(claim.fence.run_id)
    assert state.steps["a#1"].status == StepStatus.COMPLETED and state.steps["a#1"].result == b'{"v":1}'
    completed = [e for e in await store.get_events(claim.fence.run_id) if e.type == "step_completed"]
    assert len(completed) == 1


async def test_step_retry_then_final_failure(store: Store) -> None:
    claim = await _started(store)
    retry = _wait("b#1/retry:b#1", kind=WaitKind.RETRY, expires_at=T0 + 5)
    await store.fail_step(claim.fence, "b#1", attempt=1, error=b'{"m":1}', retry=retry, delivered=2, now=T0)
    state = await store.load_state(claim.fence.run_id)
    assert state.steps["b#1"].status == StepStatus.RETRYING and state.steps["b#1"].attempt == 1
    assert state.steps["b#1"].delivered == 2
    assert state.waits[retry.wait_key].kind == WaitKind.RETRY
    assert state.waits[retry.wait_key].expires_at == T0 + 5
    await store.fail_step(claim.fence, "b#1", attempt=2, error=b'{"m":2}', retry=None, delivered=1, now=T0)
    state = await store.load_state(claim.fence.run_id)
    step = state.steps["b#1"]
    assert (step.status, step.attempt, step.error, step.delivered) == (StepStatus.FAILED, 2, b'{"m":2}', 2)
    with pytest.raises(StepAlreadyCompletedError):
        await store.complete_step(claim.fence, "b#1", b"1", now=T0)


# -- checkpoints -------------------------------------------------------------------------------


async def test_checkpoints_compare_and_set(store: Store) -> None:
    claim = await _started(store)
    f = claim.fence
    assert await store.save_checkpoint(f, "s#1", "", b'{"n":1}', expected_revision=0, now=T0) == 1
    with pytest.raises(CheckpointConflictError) as info:
        await store.save_checkpoint(f, "s#1", "", b'{"n":9}', expected_revision=0, now=T0)
    assert info.value.details["current_revision"] == 1
    with pytest.raises(CheckpointConflictError):
        await store.save_checkpoint(f, "s#1", "", b'{"n":9}', expected_revision=5, now=T0)
    assert await store.save_checkpoint(f, "s#1", "", b'{"n":2}', expected_revision=1, now=T0) == 2
    assert await store.save_checkpoint(f, "s#1", "", b'{"n":3}', expected_revision=None, now=T0) == 3
    # Another name in the same scope is its own value.
    assert await store.save_checkpoint(f, "s#1", "other", b"[]", expected_revision=0, now=T0) == 1
    state = await store.load_state(f.run_id)
    assert state.checkpoints[("s#1", "")].value == b'{"n":3}'
    assert state.checkpoints[("s#1", "")].revision == 3
    assert state.checkpoints[("s#1", "other")].revision == 1
    # One event a save, keyed scope[/name]; a refused save (a conflict) writes nothing.
    saved = [e.key for e in await store.get_events(f.run_id) if e.type == "checkpoint_saved"]
    assert saved == ["s#1", "s#1", "s#1", "s#1/other"]
    assert await store.delete_checkpoint(f, "s#1", "", now=T0) is True
    assert await store.delete_checkpoint(f, "s#1", "", now=T0) is False
    assert await store.delete_checkpoint(f, "s#1", "other", now=T0) is True
    assert (await store.load_state(f.run_id)).checkpoints == {}
    # One event a deletion, keyed scope[/name]; deleting nothing writes none.
    deleted = [e.key for e in await store.get_events(f.run_id) if e.type == "checkpoint_deleted"]
    assert deleted == ["s#1", "s#1/other"]
    # After a delete the checkpoint can be created again from revision 0.
    assert await store.save_checkpoint(f, "s#1", "", b"{}", expected_revision=0, now=T0) == 1
    # A turn whose lease was taken over deletes nothing.
    [taken] = await store.claim("w2", limit=1, now=T0 + TTL + 1, lease_ttl=TTL, max_crashes=3)
    with pytest.raises(LeaseLostError):
        await store.delete_checkpoint(f, "s#1", "", now=T0 + TTL + 2)
    # ... nor saves one, even at the revision it expects.
    with pytest.raises(LeaseLostError):
        await store.save_checkpoint(f, "s#1", "", b"[]", expected_revision=1, now=T0 + TTL + 2)
    assert (await taken.load_state(store)).checkpoints[("s#1", "")].value == b"{}"
    assert [e.type for e in await store.get_events(f.run_id)].count("checkpoint_saved") == 5


async def test_concurrent_checkpoint_writers_one_wins(store_url: str, store: Store) -> None:
    claim = await _started(store)
    other = open_store(store_url)
    try:
        results = await asyncio.gather(
            store.save_checkpoint(claim.fence, "s#1", "", b"1", expected_revision=0, now=T0),
            other.save_checkpoint(claim.fence, "s#1", "", b"2", expected_revision=0, now=T0),
            return_exceptions=True,
        )
    finally:
        other.close()
    assert sorted(type(r).__name__ for r in results) == ["CheckpointConflictError", "int"]
    assert (await store.load_state(claim.fence.run_id)).checkpoints[("s#1", "")].revision == 1


# -- waits -------------------------------------------------------------------------------------


async def test_create_wait_is_idempotent(store: Store) -> None:
    claim = await _started(store)
    first = await store.create_wait(claim.fence, _wait(expires_at=T0 + 60), now=T0)
    again = await store.create_wait(claim.fence, _wait(expires_at=T0 + 999), now=T0 + 1)
    assert again.id == first.id and again.expires_at == T0 + 60 and again.status == WaitStatus.PENDING
    assert await store.get_wait(first.id) is not None
    created = [e for e in await store.get_events(claim.fence.run_id) if e.type == "wait_created"]
    assert len(created) == 1


async def test_a_suspension_on_a_wait_that_exists(store: Store) -> None:
    """create_wait(suspend=True) of a key the run has already: the first wait comes back, and the
    suspension is recorded all the same (PostgreSQL's outcome 'exists'); nothing else is written."""
    claim = await _started(store)
    first = await store.create_wait(claim.fence, _wait(expires_at=T0 + 60), now=T0)
    again = await store.create_wait(claim.fence, _wait(expires_at=T0 + 999), now=T0 + 1, suspend=True)
    assert again.id == first.id and again.expires_at == T0 + 60 and again.created_at == T0
    run = await store.get_run(claim.fence.run_id)
    assert run is not None and run.status == RunStatus.SUSPENDED
    types = [e.type for e in await store.get_events(claim.fence.run_id)]
    assert types == ["run_created", "wait_created", "run_suspended"]
    assert len((await store.load_state(claim.fence.run_id)).waits) == 1


async def test_delivered_counts_only_grow(store: Store) -> None:
    """A suspension records how many of each step's hook payloads were delivered; a later turn's
    smaller count (replay delivered fewer before suspending again) does not lower it."""
    digest = secrets.token_bytes(32)
    claim = await _started(store)
    wait = await store.create_wait(claim.fence, _wait(token=digest), now=T0)
    await store.suspend_run(claim.fence, notified=[wait.id], delivered={"g#1": 3}, now=T0)
    await store.resolve_wait(token_digest=digest, payload=b"1", now=T0 + 1)
    [again] = await store.claim("w1", limit=1, now=T0 + 1, lease_ttl=TTL, max_crashes=3)
    second = await store.create_wait(again.fence, _wait("s#2/step_hook:approve#1"), now=T0 + 2)
    delivered = {"g#1": 1, "h#1": 2, 'odd "key"/#1': 4}
    await store.suspend_run(again.fence, notified=[second.id], delivered=delivered, now=T0 + 2)
    state = await store.load_state(claim.fence.run_id)
    assert {k: s.delivered for k, s in state.steps.items()} == {"g#1": 3, "h#1": 2, 'odd "key"/#1': 4}
    assert state.waits[second.wait_key].notified is True
    assert not await store.has_ready(now=T0 + 2 * TTL)


async def test_resolve_wait_by_token_and_id(store: Store) -> None:
    digest = secrets.token_bytes(32)
    wait = _wait(token=digest)
    _, run_id = await _suspended_on(store, wait)
    assert not await store.has_ready(now=T0)  # suspended: no queue row
    found = await store.get_wait_by_token(digest)
    assert found is not None and found.id == wait.id and found.notified is True
    resolved = await store.resolve_wait(token_digest=digest, payload=b'{"ok":true}', now=T0 + 1)
    assert resolved.status == WaitStatus.RECEIVED and resolved.payload == b'{"ok":true}'
    assert resolved.run_id == run_id
    # The run is woken in the same transaction.
    assert await store.has_ready(now=T0 + 1)
    [claim] = await store.claim("w2", limit=1, now=T0 + 1, lease_ttl=TTL, max_crashes=3)
    assert claim.resumed is True and claim.fence.run_id == run_id
    state = await store.load_state(run_id)
    assert state.waits[wait.wait_key].status == WaitStatus.RECEIVED
    assert state.waits[wait.wait_key].payload == b'{"ok":true}'
    # A second payload is refused and changes nothing, by token or by id.
    with pytest.raises(HookAlreadyReceivedError):
        await store.resolve_wait(token_digest=digest, payload=b"2", now=T0 + 2)
    with pytest.raises(HookAlreadyReceivedError):
        await store.resolve_wait(wait_id=wait.id, payload=b"2", now=T0 + 2)
    assert (await store.get_wait(wait.id)).payload == b'{"ok":true}'  # type: ignore[union-attr]


async def test_resolve_unknown_wait(store: Store) -> None:
    with pytest.raises(HookNotFoundError):
        await store.resolve_wait(token_digest=secrets.token_bytes(32), payload=b"1", now=T0)
    with pytest.raises(HookNotFoundError):
        await store.resolve_wait(wait_id="nope", payload=b"1", now=T0)
    assert await store.get_wait_by_token(secrets.token_bytes(32)) is None


async def test_extra_tokens_resolve_the_same_wait(store: Store) -> None:
    claim = await _started(store)
    wait = await store.create_wait(claim.fence, _wait(), now=T0)
    extra = secrets.token_bytes(32)
    await store.add_wait_token(claim.fence, wait.id, extra)
    await store.suspend_run(claim.fence, notified=[wait.id], delivered={}, now=T0)
    found = await store.get_wait_by_token(extra)
    assert found is not None and found.id == wait.id
    resolved = await store.resolve_wait(token_digest=extra, payload=b"1", now=T0 + 1)
    assert resolved.id == wait.id and resolved.status == WaitStatus.RECEIVED


async def test_wait_expires_when_due(store: Store) -> None:
    digest = secrets.token_bytes(32)
    wait = _wait(token=digest, expires_at=T0 + 10)
    _, run_id = await _suspended_on(store, wait)
    assert await store.next_due() == T0 + 10
    assert await store.expire_due_waits(now=T0 + 9) == 0
    assert await store.expire_due_waits(now=T0 + 10) == 1
    assert await store.expire_due_waits(now=T0 + 11) == 0
    expired = await store.get_wait(wait.id)
    assert expired is not None and expired.status == WaitStatus.EXPIRED and expired.resolved_at == T0 + 10
    assert await store.has_ready(now=T0 + 10)
    with pytest.raises(HookExpiredError):
        await store.resolve_wait(token_digest=digest, payload=b"1", now=T0 + 11)
    types = [e.type for e in await store.get_events(run_id)]
    assert types.count("wait_expired") == 1 and "wait_received" not in types


async def test_resolve_past_deadline_records_the_expiry(store: Store) -> None:
    digest = secrets.token_bytes(32)
    wait = _wait(token=digest, expires_at=T0 + 10)
    await _suspended_on(store, wait)
    with pytest.raises(HookExpiredError):
        await store.resolve_wait(token_digest=digest, payload=b"1", now=T0 + 10.5)
    expired = await store.get_wait(wait.id)
    assert expired is not None and expired.status == WaitStatus.EXPIRED and expired.payload is None
    assert await store.has_ready(now=T0 + 11)  # the run is woken to see its timeout
    assert await store.expire_due_waits(now=T0 + 20) == 0


async def test_resolve_racing_expiry_has_exactly_one_winner(store_url: str, store: Store) -> None:
    other = open_store(store_url)
    try:
        outcomes = {"received": 0, "expired": 0}
        for i in range(15):
            digest = secrets.token_bytes(32)
            deadline = T0 + 100 + i
            wait = _wait(token=digest, expires_at=deadline)
            await _suspended_on(store, wait)
            resolved, expired = await asyncio.gather(
                store.resolve_wait(token_digest=digest, payload=b'"yes"', now=deadline - 0.001),
                other.expire_due_waits(now=deadline),
                return_exceptions=True,
            )
            final = await store.get_wait(wait.id)
            assert final is not None
            if isinstance(resolved, BaseException):
                assert isinstance(resolved, HookExpiredError) and expired == 1
                assert final.status == WaitStatus.EXPIRED and final.payload is None
                outcomes["expired"] += 1
            else:
                assert expired == 0 and resolved.status == WaitStatus.RECEIVED
                assert final.status == WaitStatus.RECEIVED and final.payload == b'"yes"'
                outcomes["received"] += 1
            events = [e.type for e in await store.get_events(wait_run_id(final))]
            assert events.count("wait_received") + events.count("wait_expired") == 1
        assert sum(outcomes.values()) == 15
    finally:
        other.close()


def wait_run_id(wait: object) -> str:
    return str(wait.run_id)  # type: ignore[attr-defined]


# -- turns -------------------------------------------------------------------------------------


async def test_suspend_without_wake_drops_the_queue_row(store: Store) -> None:
    claim = await _started(store)
    wait = await store.create_wait(claim.fence, _wait(), now=T0)
    await store.suspend_run(claim.fence, notified=[wait.id], delivered={"g#1": 3}, now=T0)
    run = await store.get_run(claim.fence.run_id)
    assert run is not None and run.status == RunStatus.SUSPENDED
    assert not await store.has_ready(now=T0 + 1000)
    assert await store.next_due() is None
    state = await store.load_state(claim.fence.run_id)
    assert state.waits[wait.wait_key].notified is True
    assert state.steps["g#1"].status == StepStatus.RUNNING and state.steps["g#1"].delivered == 3
    # The fence of a finished turn is gone.
    with pytest.raises(LeaseLostError):
        await store.complete_step(claim.fence, "x#1", b"1", now=T0)


async def test_wake_during_a_turn_keeps_the_queue_row(store: Store) -> None:
    digest = secrets.token_bytes(32)
    claim = await _started(store)
    wait = await store.create_wait(claim.fence, _wait(token=digest), now=T0)
    # The decision arrives before the turn has recorded its suspension.
    await store.resolve_wait(token_digest=digest, payload=b"1", now=T0 + 0.5)
    await store.suspend_run(claim.fence, notified=[wait.id], delivered={}, now=T0 + 1)
    assert await store.has_ready(now=T0 + 1)
    [again] = await store.claim("w1", limit=1, now=T0 + 1, lease_ttl=TTL, max_crashes=3)
    assert again.fence.run_id == claim.fence.run_id and again.resumed is True
    state = await store.load_state(claim.fence.run_id)
    assert state.waits[wait.wait_key].status == WaitStatus.RECEIVED
    await store.complete_run(again.fence, b"1", now=T0 + 2)
    assert not await store.has_ready(now=T0 + 2)


#: The claim paths of the store under test: a Celery turn's ``claim_run`` is the PostgreSQL store's.
_CLAIM_PATHS = ["claim", "poll"] + (
    ["claim_run"] if os.environ.get("PYWORKFLOW_TEST_STORE", "sqlite") in ("postgresql", "postgres") else []
)


@pytest.mark.parametrize("way", [*_CLAIM_PATHS, "decision"])
async def test_a_claim_gives_the_state_replay_starts_from(store: Store, way: str) -> None:
    """A new run's claim starts from nothing; a resumed run's carries what load_state reads, read
    with the claim (``Claim.state``: SQLite in the claim's own transaction, PostgreSQL by the
    claim's statement after the lease), by every way of claiming; each of several runs claimed
    together gets its own."""
    fresh = await _started(store)
    assert await fresh.load_state(store) == RunState()

    runs: dict[str, tuple[Claim, str, bytes]] = {}
    for n in (1, 2):
        digest = secrets.token_bytes(32)
        claim = await _started(store)
        await store.complete_step(claim.fence, "a#1", b'{"done":%d}' % n, now=T0)
        await store.save_checkpoint(claim.fence, "s#1", "", b'{"n":%d}' % n, expected_revision=0, now=T0)
        wait = await store.create_wait(claim.fence, _wait(token=digest), now=T0)
        await store.suspend_run(claim.fence, notified=[wait.id], delivered={}, now=T0)
        runs[claim.fence.run_id] = (claim, wait.wait_key, digest)

    taken: list[Claim] = []
    for run_id, (_, _, digest) in runs.items():
        if way == "decision":
            _, woke = await store.resolve_wait_and_claim(
                token_digest=digest, payload=b'{"ok":true}', now=T0 + 1, check=None,
                owner="w1", lease_ttl=TTL, max_crashes=3,
            )  # fmt: skip
            assert woke is not None  # the decision's own claim
            taken.append(woke)
        else:
            await store.resolve_wait(token_digest=digest, payload=b'{"ok":true}', now=T0 + 1)
            if way == "claim_run":
                one = await store.claim_run(run_id, "w1", now=T0 + 1, lease_ttl=TTL, max_crashes=3)  # type: ignore[attr-defined]
                taken += [one] if one is not None else []
    if way == "claim":
        taken = await store.claim("w1", limit=10, now=T0 + 1, lease_ttl=TTL, max_crashes=3)
    elif way == "poll":
        taken = (await store.poll("w1", limit=10, now=T0 + 1, lease_ttl=TTL, max_crashes=3)).claims

    assert sorted(c.fence.run_id for c in taken) == sorted(runs)
    for again in taken:
        assert again.resumed is True
        assert again.state is not None  # read with the claim, not by the runtime after it
        state = await again.load_state(store)
        assert state == await store.load_state(again.fence.run_id)
        _, wait_key, _ = runs[again.fence.run_id]
        done = state.steps["a#1"].result
        assert state.steps["a#1"].status == StepStatus.COMPLETED
        assert state.checkpoints[("s#1", "")].value == done.replace(b"done", b"n")  # type: ignore[union-attr]
        assert list(state.waits) == [wait_key]
        assert state.waits[wait_key].status == WaitStatus.RECEIVED
        assert state.waits[wait_key].payload == b'{"ok":true}'
    # Each run got its own state, not the other's.
    assert len({c.state.steps["a#1"].result for c in taken if c.state is not None}) == 2


async def test_complete_and_fail_run_cancel_pending_waits(store: Store) -> None:
    a = await _started(store)
    wa = await store.create_wait(a.fence, _wait(expires_at=T0 + 5), now=T0)
    await store.complete_run(a.fence, b'{"r":1}', now=T0 + 1)
    run = await store.get_run(a.fence.run_id)
    assert run is not None and run.status == RunStatus.COMPLETED and run.finished_at == T0 + 1
    assert (await store.get_wait(wa.id)).status == WaitStatus.CANCELLED  # type: ignore[union-attr]
    b = await _started(store)
    await store.fail_run(b.fence, b'{"type":"E"}', now=T0 + 1)
    run = await store.get_run(b.fence.run_id)
    assert run is not None and run.status == RunStatus.FAILED and run.error == b'{"type":"E"}'
    assert await store.next_due() is None
    assert await store.expire_due_waits(now=T0 + 100) == 0


# -- crashes -----------------------------------------------------------------------------------


async def test_crashes_are_counted_and_max_crashes_fails_the_run(store: Store) -> None:
    claim = await _started(store)
    run_id = claim.fence.run_id
    wait = await store.create_wait(claim.fence, _wait(expires_at=T0 + 10_000), now=T0)
    now = T0
    epochs = [claim.fence.epoch]
    for _ in range(2):  # the worker dies twice: two crashes allowed
        now += TTL + 1
        [again] = await store.claim("w", limit=1, now=now, lease_ttl=TTL, max_crashes=2)
        epochs.append(again.fence.epoch)
    assert epochs == [1, 2, 3]
    now += TTL + 1
    assert await store.claim("w", limit=1, now=now, lease_ttl=TTL, max_crashes=2) == []
    run = await store.get_run(run_id)
    assert run is not None and run.status == RunStatus.FAILED and run.error is not None
    error = orjson.loads(run.error)
    assert error["type"] == "pyworkflow.WorkerCrashed" and "max_crashes" in error["message"]
    assert (await store.get_wait(wait.id)).status == WaitStatus.CANCELLED  # type: ignore[union-attr]
    assert not await store.has_ready(now=now + 1000)
    assert [e.type for e in await store.get_events(run_id)][-1] == "run_failed"


_CRASHED_TWICE = (
    b'{"type":"pyworkflow.WorkerCrashed","message":"the worker running this run died 2 times;'
    b' giving up (max_crashes)"}'
)


@pytest.mark.parametrize("path", _CLAIM_PATHS)
async def test_every_claim_path_applies_the_one_crash_limit(store: Store, path: str) -> None:
    """The crash limit is one rule per dialect (SQLite: ``_claim_row``; PostgreSQL: the server-side
    ``pyworkflow_claim_row``): ``claim``, a runtime's tick (``poll``) and a Celery turn's
    ``claim_run`` (PostgreSQL) reach it and fail the run the same way, with the same bytes."""

    async def take(now: float) -> list[Claim]:
        if path == "claim":
            return await store.claim("w", limit=1, now=now, lease_ttl=TTL, max_crashes=1)
        if path == "poll":
            return (await store.poll("w", limit=1, now=now, lease_ttl=TTL, max_crashes=1)).claims
        one = await store.claim_run(run_id, "w", now=now, lease_ttl=TTL, max_crashes=1)  # type: ignore[attr-defined]
        return [one] if one is not None else []

    claim = await _started(store)
    run_id = claim.fence.run_id
    wait = await store.create_wait(claim.fence, _wait(expires_at=T0 + 10_000), now=T0)
    [again] = await take(T0 + TTL + 1)  # the first crash is allowed
    assert again.fence.epoch == 2 and again.resumed is True
    assert await take(T0 + 2 * TTL + 2) == []  # the second is one too many
    run = await store.get_run(run_id)
    assert run is not None and run.status == RunStatus.FAILED and run.error == _CRASHED_TWICE
    assert run.finished_at == T0 + 2 * TTL + 2
    assert (await store.get_wait(wait.id)).status == WaitStatus.CANCELLED  # type: ignore[union-attr]
    assert not await store.has_ready(now=T0 + 10_000) and await store.next_due() is None  # no queue row
    last = (await store.get_events(run_id))[-1]
    assert (last.type, last.data) == ("run_failed", _CRASHED_TWICE)
    with pytest.raises(LeaseLostError):
        await store.complete_run(again.fence, b"{}", now=T0 + 2 * TTL + 3)


# -- cancel ------------------------------------------------------------------------------------


async def test_cancel_run(store: Store) -> None:
    digest = secrets.token_bytes(32)
    claim = await _started(store)
    wait = await store.create_wait(claim.fence, _wait(token=digest, expires_at=T0 + 5), now=T0)
    assert await store.cancel_run(claim.fence.run_id, now=T0 + 1) is True
    run = await store.get_run(claim.fence.run_id)
    assert run is not None and run.status == RunStatus.CANCELLED
    assert (await store.get_wait(wait.id)).status == WaitStatus.CANCELLED  # type: ignore[union-attr]
    with pytest.raises(CancellationError):
        await store.complete_step(claim.fence, "a#1", b"1", now=T0 + 1)
    with pytest.raises(HookCancelledError):
        await store.resolve_wait(token_digest=digest, payload=b"1", now=T0 + 2)
    assert not await store.has_ready(now=T0 + 100)
    assert await store.expire_due_waits(now=T0 + 100) == 0
    assert await store.cancel_run(claim.fence.run_id, now=T0 + 2) is False
    with pytest.raises(WorkflowNotFoundError):
        await store.cancel_run("no-such-run", now=T0)


async def test_cancel_of_a_pending_run_is_never_claimed(store: Store) -> None:
    run_id = _id()
    await store.create_run(run_id, "wf", b"{}", now=T0, lease_owner=None, lease_ttl=TTL)
    assert await store.cancel_run(run_id, now=T0) is True
    assert await store.claim("w", limit=5, now=T0 + 1, lease_ttl=TTL, max_crashes=3) == []


# -- next_due ----------------------------------------------------------------------------------


async def test_next_due(store: Store) -> None:
    assert await store.next_due() is None
    await store.create_run(_id(), "wf", b"{}", now=T0 + 50, lease_owner=None, lease_ttl=TTL)
    assert await store.next_due() == T0 + 50
    claim = await _started(store, now=T0 + 60)  # a lease: due when it would run out
    assert await store.next_due() == T0 + 50
    await store.create_wait(claim.fence, _wait(expires_at=T0 + 20), now=T0 + 60)
    assert await store.next_due() == T0 + 20
    await store.suspend_run(claim.fence, notified=[], delivered={}, now=T0 + 60)
    assert await store.next_due() == T0 + 20
    assert await store.expire_due_waits(now=T0 + 20) == 1
    assert await store.next_due() == T0 + 20  # its run is due now (woken at the expiry)


# -- poll (a runtime's tick in one call) ---------------------------------------------------------


async def test_poll_with_nothing_due_changes_nothing(store: Store) -> None:
    empty = await store.poll("w1", limit=10, now=T0, lease_ttl=TTL, max_crashes=3)
    assert empty.claims == [] and empty.next_due is None
    run_id = _id()
    await store.create_run(run_id, "wf", b"{}", now=T0 + 50, lease_owner=None, lease_ttl=TTL)
    early = await store.poll("w1", limit=10, now=T0, lease_ttl=TTL, max_crashes=3)
    assert early.claims == [] and early.next_due == T0 + 50
    assert (await store.get_run(run_id)).status == RunStatus.PENDING  # type: ignore[union-attr]


async def test_poll_expires_claims_and_reports_next_due(store: Store) -> None:
    fresh = [_id() for _ in range(3)]
    for run_id in fresh:
        await store.create_run(run_id, "wf", b'{"n":1}', now=T0, lease_owner=None, lease_ttl=TTL)
    wait = _wait(expires_at=T0 + 5)
    _, waiting = await _suspended_on(store, wait)
    later = _wait(key="s#2/step_hook:approve#1", expires_at=T0 + 500)
    await _suspended_on(store, later)

    first = await store.poll("w1", limit=2, now=T0 + 1, lease_ttl=TTL, max_crashes=3)
    assert len(first.claims) == 2 and {c.fence.run_id for c in first.claims} < set(fresh)
    claim = first.claims[0]
    assert claim.fence.epoch == 1 and claim.resumed is False and claim.workflow == "wf"
    assert claim.input == b'{"n":1}'
    assert first.next_due == T0  # the third run is still due (since T0)
    assert (await store.get_run(claim.fence.run_id)).status == RunStatus.RUNNING  # type: ignore[union-attr]

    # Limit 0 (a runtime at capacity): due waits expire, nothing is claimed.
    full = await store.poll("w1", limit=0, now=T0 + 6, lease_ttl=TTL, max_crashes=3)
    assert full.claims == [] and full.next_due == T0
    expired = await store.get_wait(wait.id)
    assert expired is not None and expired.status == WaitStatus.EXPIRED and expired.resolved_at == T0 + 6

    rest = await store.poll("w2", limit=10, now=T0 + 7, lease_ttl=TTL, max_crashes=3)
    by_run = {c.fence.run_id: c for c in rest.claims}
    assert set(by_run) == (set(fresh) - {c.fence.run_id for c in first.claims}) | {waiting}
    assert by_run[waiting].resumed is True and by_run[waiting].fence.wake_seq == 1
    # Next: the first claims' leases run out (T0 + 1 + TTL) before the later wait (T0 + 500).
    assert rest.next_due == T0 + 1 + TTL
    types = [e.type for e in await store.get_events(waiting)]
    assert types[-2:] == ["wait_expired", "run_resumed"]
    assert (await store.poll("w2", limit=10, now=T0 + 8, lease_ttl=TTL, max_crashes=3)).claims == []


async def test_poll_recovers_and_fails_crashed_runs(store: Store) -> None:
    claim = await _started(store)
    [again] = (await store.poll("w2", limit=1, now=T0 + TTL + 1, lease_ttl=TTL, max_crashes=1)).claims
    assert again.fence.epoch == claim.fence.epoch + 1 and again.resumed is True
    assert (await store.get_events(claim.fence.run_id))[-1].type == "run_recovered"
    gone = await store.poll("w3", limit=1, now=T0 + 2 * TTL + 2, lease_ttl=TTL, max_crashes=1)
    assert gone.claims == [] and gone.next_due is None
    run = await store.get_run(claim.fence.run_id)
    assert run is not None and run.status == RunStatus.FAILED and run.error is not None
    assert orjson.loads(run.error)["type"] == "pyworkflow.WorkerCrashed"


# -- reads -------------------------------------------------------------------------------------


async def test_get_and_list(store: Store) -> None:
    assert await store.get_run("missing") is None
    assert await store.get_wait("missing") is None
    ids = []
    for i in range(4):
        rid = _id()
        ids.append(rid)
        await store.create_run(rid, "a" if i % 2 else "b", b"{}", now=T0 + i, lease_owner=None, lease_ttl=TTL)
    runs = await store.list_runs()
    assert [r.id for r in runs] == ids[::-1]  # newest first
    assert [r.id for r in await store.list_runs(limit=2)] == ids[::-1][:2]
    assert {r.id for r in await store.list_runs(workflow="a")} == {ids[1], ids[3]}
    assert await store.list_runs(status=RunStatus.COMPLETED) == []
    assert len(await store.list_runs(status=RunStatus.PENDING, workflow="b")) == 2
    # Cursor pages: each continues right after the last run of the one before, ties of creation
    # time broken by id, so that pages neither repeat nor skip a run.
    tied = sorted(_id() for _ in range(3))
    for rid in tied:
        await store.create_run(rid, "a", b"{}", now=T0 + 2, lease_owner=None, lease_ttl=TTL)
    every = [r.id for r in await store.list_runs(limit=100)]
    assert len(every) == 7 and every.index(tied[2]) < every.index(tied[0])
    pages, after = [], None
    while True:
        page = [r.id for r in await store.list_runs(limit=2, after=after)]
        pages += page
        if len(page) < 2:
            break
        after = page[-1]
    assert pages == every
    assert [r.id for r in await store.list_runs(workflow="a", after=tied[1])] == [
        i for i in every[every.index(tied[1]) + 1 :] if i in {ids[1], ids[3], *tied}
    ]
    with pytest.raises(WorkflowNotFoundError):
        await store.list_runs(after="no-such-run")
    claim = await _started(store, now=T0 + 10)
    w1 = await store.create_wait(claim.fence, _wait("k#1"), now=T0 + 10)
    w2 = await store.create_wait(claim.fence, _wait("k#2"), now=T0 + 11)
    assert [w.id for w in await store.list_waits()] == [w1.id, w2.id]
    assert [w.id for w in await store.list_waits(limit=1)] == [w1.id]
    await store.complete_run(claim.fence, b"1", now=T0 + 12)
    assert await store.list_waits() == []
    assert {w.id for w in await store.list_waits(status=WaitStatus.CANCELLED)} == {w1.id, w2.id}
    assert len(await store.list_waits(status=None)) == 2
    events = await store.get_events(claim.fence.run_id)
    assert [e.seq for e in events] == list(range(1, len(events) + 1))
    assert [e.seq for e in await store.get_events(claim.fence.run_id, after_seq=2, limit=2)] == [3, 4]
    assert await store.get_events("missing") == []


async def test_load_state_reads_only_the_run(store: Store) -> None:
    a, b = await _started(store), await _started(store)
    await store.complete_step(a.fence, "x#1", b"1", now=T0)
    await store.save_checkpoint(b.fence, "y#1", "", b"2", expected_revision=0, now=T0)
    state_a, state_b = await store.load_state(a.fence.run_id), await store.load_state(b.fence.run_id)
    assert list(state_a.steps) == ["x#1"] and state_a.checkpoints == {} and state_a.waits == {}
    assert state_b.steps == {} and list(state_b.checkpoints) == [("y#1", "")]
    empty = await store.load_state("missing")
    assert (empty.steps, empty.waits, empty.checkpoints) == ({}, {}, {})


async def test_concurrent_claimers_never_share_a_run(store_url: str, store: Store) -> None:
    for _ in range(40):
        await store.create_run(_id(), "wf", b"{}", now=T0, lease_owner=None, lease_ttl=TTL)
    others = [open_store(store_url) for _ in range(2)]
    try:
        batches = await asyncio.gather(
            *(
                s.claim(f"w{i}", limit=7, now=T0 + 1, lease_ttl=TTL, max_crashes=3)
                for i, s in enumerate([store, *others, store, *others])
            )
        )
    finally:
        for s in others:
            s.close()
    claimed = [c.fence.run_id for batch in batches for c in batch]
    assert len(claimed) == len(set(claimed)) == 40
    assert {c.fence.epoch for batch in batches for c in batch} == {1}


# -- one run at a time: what may share a commit ---------------------------------------------------


async def test_a_suspension_recorded_with_its_wait(store: Store) -> None:
    """create_wait(suspend=True) then suspend_run(recorded=True): the run ends up suspended, its
    hook notified, its lease released, one run_suspended event, and ``then`` hears of it (once
    the end of the turn is durable: a store may write it without waiting)."""
    claim = await _started(store)
    run_id, wait = claim.fence.run_id, _wait()
    await store.create_wait(claim.fence, wait, now=T0, suspend=True)
    done = asyncio.Event()
    outcomes: list[BaseException | None] = []
    loop = asyncio.get_running_loop()

    def then(error: BaseException | None) -> None:
        outcomes.append(error)
        loop.call_soon_threadsafe(done.set)

    await store.suspend_run(claim.fence, notified=[wait.id], delivered={}, now=T0, recorded=True, then=then)
    await asyncio.wait_for(done.wait(), 10)
    assert outcomes == [None]
    run = await store.get_run(run_id)
    assert run is not None and run.status == RunStatus.SUSPENDED
    got = await store.get_wait(wait.id)
    assert got is not None and got.notified and got.status == WaitStatus.PENDING
    assert not await store.has_ready(now=T0 + 2 * TTL)  # no lease left to expire
    types = [e.type for e in await store.get_events(run_id)]
    assert types == ["run_created", "wait_created", "run_suspended"]


async def test_a_deferred_checkpoint_deletion_comes_before_later_writes(store: Store) -> None:
    claim = await _started(store)
    fence = claim.fence
    assert await store.save_checkpoint(fence, "s#1", "", b"1", expected_revision=0, now=T0) == 1
    assert await store.delete_checkpoint(fence, "s#1", "", now=T0, defer=True)
    # A save that expects no checkpoint works: the deletion was applied first.
    assert await store.save_checkpoint(fence, "s#1", "", b"2", expected_revision=0, now=T0) == 1
    state = await store.load_state(fence.run_id)
    assert state.checkpoints[("s#1", "")].value == b"2"


async def test_a_deferred_checkpoint_deletion_is_written_with_the_turns_next_write(store: Store) -> None:
    """Whatever the turn writes next (the step's result, a failure with a retry, an added hook
    token, the release of its lease), the deletion is written first, with its one event."""
    for then in ("complete_step", "fail_step", "add_wait_token", "release"):
        fence = (await _started(store)).fence
        assert await store.save_checkpoint(fence, "s#1", "", b"1", expected_revision=0, now=T0) == 1
        wait = await store.create_wait(fence, _wait(), now=T0)
        assert await store.delete_checkpoint(fence, "s#1", "", now=T0 + 1, defer=True)
        if then == "complete_step":
            await store.complete_step(fence, "s#1", b"{}", now=T0 + 2)
        elif then == "fail_step":
            retry = _wait("s#1/retry#1", kind=WaitKind.TIMER, expires_at=T0 + 5)
            await store.fail_step(fence, "s#1", attempt=1, error=b"{}", retry=retry, delivered=0, now=T0 + 2)
        elif then == "add_wait_token":
            await store.add_wait_token(fence, wait.id, secrets.token_bytes(32))
        else:
            await store.release(fence, now=T0 + 2)
        assert (await store.load_state(fence.run_id)).checkpoints == {}, then
        events = [(e.type, e.key) for e in await store.get_events(fence.run_id)]
        assert events.count(("checkpoint_deleted", "s#1")) == 1, (then, events)


async def test_a_deferred_deletion_of_a_turn_taken_over_deletes_nothing(store: Store) -> None:
    """The turn that deferred the deletion lost its lease before writing again: the new turn's
    writes work, and the checkpoint it saved stays."""
    fence = (await _started(store)).fence
    assert await store.save_checkpoint(fence, "s#1", "", b"1", expected_revision=0, now=T0) == 1
    assert await store.delete_checkpoint(fence, "s#1", "", now=T0, defer=True)
    (claim,) = await store.claim("w2", limit=1, now=T0 + 2 * TTL, lease_ttl=TTL, max_crashes=5)
    assert claim.fence.run_id == fence.run_id and claim.fence.epoch > fence.epoch
    new = claim.fence
    assert await store.save_checkpoint(new, "s#1", "", b"2", expected_revision=None, now=T0 + 2 * TTL) >= 1
    await store.create_wait(new, _wait(), now=T0 + 2 * TTL)
    with pytest.raises(LeaseLostError):
        await store.complete_run(fence, b"{}", now=T0 + 2 * TTL)
    assert (await store.load_state(fence.run_id)).checkpoints[("s#1", "")].value == b"2"
    # Written before the takeover (with the claim's transaction, SQLite) or refused by its fence
    # (PostgreSQL: carried by the new turn's first write): never after the new turn began.
    events = [e.type for e in await store.get_events(fence.run_id)]
    recovered = events.index("run_recovered")
    assert "checkpoint_deleted" not in events[recovered:], events


async def test_resolve_wait_and_claim(store: Store) -> None:
    """The decision and, in the same transaction, the woken run's claim for the caller, with
    the state replay starts from; a run another turn holds is left to that turn's end."""
    digest = secrets.token_bytes(32)
    _, run_id = await _suspended_on(store, _wait(token=digest))
    wait, claim = await store.resolve_wait_and_claim(
        token_digest=digest, payload=b'{"ok":true}', now=T0 + 1, check=None, owner="w2", lease_ttl=TTL,
        max_crashes=5,
    )  # fmt: skip
    assert wait.status == WaitStatus.RECEIVED and wait.run_id == run_id
    assert claim is not None and claim.fence.run_id == run_id and claim.resumed
    assert claim.state is not None and claim.state == await store.load_state(run_id)
    assert claim.state.waits[wait.wait_key].status == WaitStatus.RECEIVED
    assert [e.type for e in await store.get_events(run_id)][-2:] == ["wait_received", "run_resumed"]
    assert (await store.claim("w3", limit=10, now=T0 + 2, lease_ttl=TTL, max_crashes=5)) == []
    run = await store.get_run(run_id)
    assert run is not None and run.status == RunStatus.RUNNING
    with pytest.raises(HookAlreadyReceivedError):
        await store.resolve_wait_and_claim(
            token_digest=digest,
            payload=b"2",
            now=T0 + 3,
            check=None,
            owner="w2",
            lease_ttl=TTL,
            max_crashes=5,
        )


async def test_a_decision_for_a_run_in_a_turn_claims_nothing(store: Store) -> None:
    """A decision whose run another turn holds records the decision and claims nothing: the
    wake-up keeps the run's queue row, and the turn's end leaves it due for any claim."""
    digest = secrets.token_bytes(32)
    claim = await _started(store)
    wait = await store.create_wait(claim.fence, _wait(token=digest), now=T0)
    decided, woke = await store.resolve_wait_and_claim(
        token_digest=digest, payload=b"1", now=T0 + 1, check=None, owner="w2", lease_ttl=TTL, max_crashes=5
    )
    assert decided.status == WaitStatus.RECEIVED and woke is None
    await store.suspend_run(claim.fence, notified=[wait.id], delivered={}, now=T0 + 2)
    [again] = await store.claim("w3", limit=10, now=T0 + 2, lease_ttl=TTL, max_crashes=5)
    assert again.fence.run_id == claim.fence.run_id and again.fence.epoch == claim.fence.epoch + 1


async def test_next_due_is_the_earliest_unleased_row_lease_expiry_or_deadline(store: Store) -> None:
    """The runtime's next due time: the earliest of an unleased queue row's due time, a lease's
    expiry (a crashed turn's run becomes claimable then) and a pending wait's deadline, read
    through indexes (migration sqlite 0007 / postgres 0013), the same minimum as before."""
    assert await store.next_due() is None
    later = await store.create_run(_id(), "wf", b'{"args":[]}', now=T0 + 50, lease_owner=None, lease_ttl=TTL)
    assert later is None and await store.next_due() == T0 + 50  # unleased, due when created
    held = await _started(store, now=T0)  # leased until T0 + 30
    assert await store.next_due() == T0 + 30  # the lease runs out before the other run is due
    await store.create_run(_id(), "wf", b'{"args":[]}', now=T0 + 5, lease_owner=None, lease_ttl=TTL)
    assert await store.next_due() == T0 + 5
    claims = await store.claim("w2", limit=10, now=T0 + 6, lease_ttl=100.0, max_crashes=5)
    assert len(claims) == 1  # the run due at T0 + 5 (the other is not due, the third is leased)
    assert await store.next_due() == T0 + 30  # leases until T0 + 30 and T0 + 106, a row due at T0 + 50
    await store.release(held.fence, now=T0 + 20)  # unleased again, due at once
    assert await store.next_due() == T0 + 20
    _, waiting = await _suspended_on(store, _wait(expires_at=T0 + 3), now=T0)
    assert await store.next_due() == T0 + 3  # a deadline
    await store.expire_due_waits(now=T0 + 4)  # its run is woken: due at T0 + 4
    assert await store.next_due() == T0 + 4
    assert await store.get_run(waiting) is not None
