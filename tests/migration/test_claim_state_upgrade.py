"""Claims that carry their run's state on PostgreSQL (pyworkflow migration 0015) and a checkpoint
deletion in one statement (0016): a run left suspended on a step hook, with a completed step and
a checkpoint, by the store before these migrations (its writes are today's) is claimed after
them, by a tick and by a Celery turn's claim, with its whole state, and its checkpoint is
deleted by the new statement."""

from __future__ import annotations

import secrets

import pytest
from upgrades import pyworkflow_postgres_before

from pyworkflow.store import NewWait, StepStatus, WaitKind, WaitStatus
from pyworkflow.store._postgres import PostgresStore

pytestmark = pytest.mark.postgres

NEW = 15  # pyworkflow's first PostgreSQL migration whose claims carry the state
T0 = 1_700_000_000.0


def _older_store(url: str) -> PostgresStore:
    return pyworkflow_postgres_before(url, NEW)


async def _parked(store: PostgresStore) -> tuple[str, bytes]:
    """A run with a completed step and a checkpoint, suspended on a step hook; its hook's token."""
    run_id, token = secrets.token_hex(8), secrets.token_bytes(32)
    claim = await store.create_run(run_id, "wf", b"{}", now=T0, lease_owner="old", lease_ttl=30)
    assert claim is not None
    await store.complete_step(claim.fence, "a#1", b'{"done":1}', now=T0)
    await store.save_checkpoint(claim.fence, "s#1", "", b'{"n":1}', expected_revision=0, now=T0)
    wait = NewWait(
        secrets.token_hex(8), "s#1/step_hook:ok#1", WaitKind.STEP_HOOK, "ok", "s#1", token, None, None
    )
    await store.create_wait(claim.fence, wait, now=T0)
    await store.suspend_run(claim.fence, notified=[wait.id], delivered={}, now=T0)
    return run_id, token


async def test_runs_parked_before_the_migration_are_claimed_with_their_state(pg_database: str) -> None:
    sql = "SELECT max(version) FROM schema_migrations WHERE component = 'pyworkflow'"
    old = _older_store(pg_database)
    try:
        assert old.database.read(lambda c: c.execute(sql).fetchone()) == (NEW - 1,)
        by_tick, by_turn = await _parked(old), await _parked(old)
    finally:
        old.close()

    store = PostgresStore(pg_database)  # applies migration 15
    try:
        assert store.database.read(lambda c: c.execute(sql).fetchone())[0] >= NEW  # type: ignore[index]
        for _, token in (by_tick, by_turn):
            await store.resolve_wait(token_digest=token, payload=b'{"ok":true}', now=T0 + 1)
        turn = await store.claim_run(by_turn[0], "new", now=T0 + 1, lease_ttl=30, max_crashes=3)
        poll = await store.poll("new", limit=10, now=T0 + 1, lease_ttl=30, max_crashes=3)
        assert turn is not None and [c.fence.run_id for c in poll.claims] == [by_tick[0]]
        for claim in (turn, poll.claims[0]):
            state = claim.state
            assert claim.resumed and state is not None
            assert state == await store.load_state(claim.fence.run_id)
            assert {k: (s.status, s.result) for k, s in state.steps.items()} == {
                "a#1": (StepStatus.COMPLETED, b'{"done":1}')
            }
            assert {k: (c.value, c.revision) for k, c in state.checkpoints.items()} == {
                ("s#1", ""): (b'{"n":1}', 1)
            }
            assert [(w.wait_key, w.status, w.payload) for w in state.waits.values()] == [
                ("s#1/step_hook:ok#1", WaitStatus.RECEIVED, b'{"ok":true}')
            ]
            assert await store.delete_checkpoint(claim.fence, "s#1", "", now=T0 + 2) is True
            assert (await store.load_state(claim.fence.run_id)).checkpoints == {}
            await store.complete_run(claim.fence, b"1", now=T0 + 2)
    finally:
        store.close()
