"""A suspension recorded with its wait on PostgreSQL (pyworkflow migration 0018): runs that the
store before it suspended, or left with a wait created and the turn not yet ended, carry on after
it; a whole suspension in one statement (``pyworkflow_suspend_run``, replaced by 0018 with the
same signature) and the new pair (the wait with the suspension, then the end of the turn written
without waiting) record one ``run_suspended`` each and free the lease."""

from __future__ import annotations

import asyncio
import secrets

import pytest
from upgrades import pyworkflow_postgres_before

from pyworkflow.store import Fence, NewWait, RunStatus, WaitKind
from pyworkflow.store._postgres import PostgresStore

pytestmark = pytest.mark.postgres

NEW = 18  # pyworkflow's first PostgreSQL migration that records a suspension with its wait
T0 = 1_700_000_000.0
SQL_VERSION = "SELECT max(version) FROM schema_migrations WHERE component = 'pyworkflow'"


def _older_store(url: str) -> PostgresStore:
    return pyworkflow_postgres_before(url, NEW)


def _hook(token: bytes) -> NewWait:
    return NewWait(
        secrets.token_hex(8), "s#1/step_hook:ok#1", WaitKind.STEP_HOOK, "ok", "s#1", token, None, None
    )


async def _started(store: PostgresStore, owner: str) -> Fence:
    claim = await store.create_run(secrets.token_hex(8), "wf", b"{}", now=T0, lease_owner=owner, lease_ttl=30)
    assert claim is not None
    return claim.fence


async def _suspensions(store: PostgresStore, run_id: str) -> int:
    return [e.type for e in await store.get_events(run_id)].count("run_suspended")


def _leased(store: PostgresStore, run_id: str) -> bool:
    sql = "SELECT count(*) FROM queue WHERE run_id = ? AND lease_owner IS NOT NULL"
    return bool(store.database.read(lambda c: c.execute(sql, (run_id,)).fetchone())[0])  # type: ignore[index]


async def test_suspensions_before_and_after_the_migration(pg_database: str) -> None:
    old = _older_store(pg_database)
    try:
        assert old.database.read(lambda c: c.execute(SQL_VERSION).fetchone()) == (NEW - 1,)
        parked_token = secrets.token_bytes(32)
        parked = await _started(old, "old")
        wait = await old.create_wait(parked, _hook(parked_token), now=T0)
        await old.suspend_run(parked, notified=[wait.id], delivered={}, now=T0)
        # A turn that created its wait and had not ended when the old process stopped (the old
        # code recorded nothing of the suspension with the wait; today's store on the old schema
        # is not asked to: it migrates first).
        midway = await _started(old, "old")
        midway_wait = await old.create_wait(midway, _hook(secrets.token_bytes(32)), now=T0)
    finally:
        old.close()

    store = PostgresStore(pg_database)  # applies migration 18
    try:
        assert store.database.read(lambda c: c.execute(SQL_VERSION).fetchone())[0] >= NEW  # type: ignore[index]
        # The old turn ends through the replaced one-statement suspension.
        await store.suspend_run(midway, notified=[midway_wait.id], delivered={"s#1": 1}, now=T0 + 1)
        run = await store.get_run(midway.run_id)
        assert run is not None and run.status == RunStatus.SUSPENDED
        assert await _suspensions(store, midway.run_id) == 1 and not _leased(store, midway.run_id)

        # The run parked before the migration is decided, claimed and finished.
        decided, claim = await store.resolve_wait_and_claim(
            token_digest=parked_token, payload=b"1", now=T0 + 2, check=None, owner="new", lease_ttl=30,
            max_crashes=3,
        )  # fmt: skip
        assert decided.run_id == parked.run_id and claim is not None and claim.resumed
        await store.complete_run(claim.fence, b"1", now=T0 + 3)
        assert await _suspensions(store, parked.run_id) == 1

        # A new turn: the wait with its suspension, then the end of the turn, nobody waiting.
        fresh = await _started(store, "new")
        fresh_wait = await store.create_wait(fresh, _hook(secrets.token_bytes(32)), now=T0 + 4, suspend=True)
        run = await store.get_run(fresh.run_id)
        assert run is not None and run.status == RunStatus.SUSPENDED  # recorded with the wait
        ended = asyncio.get_running_loop().create_future()
        loop = asyncio.get_running_loop()

        def then(error: BaseException | None) -> None:
            loop.call_soon_threadsafe(ended.set_result, error)

        await store.suspend_run(
            fresh, notified=[fresh_wait.id], delivered={}, now=T0 + 4, recorded=True, then=then
        )
        assert await asyncio.wait_for(ended, 10) is None
        assert await _suspensions(store, fresh.run_id) == 1 and not _leased(store, fresh.run_id)
        got = await store.get_wait(fresh_wait.id)
        assert got is not None and got.notified
    finally:
        store.close()
