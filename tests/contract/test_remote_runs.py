"""Runs served by remote workers (``runs.node_id`` set: atfgraph's traversers) and approvals, in
the engine's tables: pyworkflow's runtimes never claim, count or lease such a run's queue row;
a wake continues a remote run only when it is parked on that wait (``wake_run``, and
PostgreSQL's ``pyworkflow_wake`` through the decision and expiry functions); approvals are
refused by ``resolve_wait`` and expired by the engine's sweeper. Both dialects, through the
``store_url`` fixture (``PYWORKFLOW_TEST_STORE=postgresql``)."""

from __future__ import annotations

import secrets
from collections.abc import Iterator
from typing import Any

import pytest

from pyworkflow import HookNotFoundError
from pyworkflow.store import (
    GroupCommitWriter,
    RunStatus,
    SQLiteStore,
    Store,
    WaitKind,
    WaitStatus,
    open_store,
    wake_run,
)

T0 = 1_700_000_000.0
TTL = 30.0
NODE = "billing"


@pytest.fixture
def store(store_url: str) -> Iterator[Store]:
    s = open_store(store_url)
    try:
        yield s
    finally:
        s.close()


def _id() -> str:
    return secrets.token_hex(8)


def _db(store: Store) -> GroupCommitWriter[Any]:
    """The store's kit database: its write functions get a SQLite or a PgConnection."""
    if isinstance(store, SQLiteStore):
        return store.db
    return store._writer  # type: ignore[attr-defined,no-any-return]


async def _remote_run(
    store: Store,
    *,
    status: str = "pending",
    attempt: int = 0,
    max_attempts: int = 3,
    waiting_on: str | None = None,
    queued_at: float | None = T0,
    lease_owner: str | None = None,
    lease_expires_at: float | None = None,
) -> str:
    """A run served by NODE's remote workers, written as the graph store writes one: its runs
    row, and (queued_at not None) its queue row for the node."""
    run_id = _id()

    def tx(conn: Any) -> None:
        conn.execute(
            "INSERT INTO runs (id, workflow, status, input, created_at, updated_at, node_id, version,"
            " attempt, max_attempts, waiting_on) VALUES (?, ?, ?, ?, ?, ?, ?, ?, ?, ?, ?)",
            (run_id, f"{NODE}.charge", status, b"{}", T0, T0, NODE, "v1", attempt, max_attempts, waiting_on),
        )
        if queued_at is not None:
            conn.execute(
                "INSERT INTO queue (run_id, available_at, wake_seq, epoch, node_id, lease_owner,"
                " lease_expires_at) VALUES (?, ?, 0, ?, ?, ?, ?)",
                (run_id, queued_at, attempt, NODE, lease_owner, lease_expires_at),
            )

    await _db(store).write(tx)
    return run_id


async def _approval(store: Store, run_id: str, *, expires_at: float | None = None) -> str:
    """A pending approval of a remote run, as the graph store writes one."""
    wait_id = _id()

    def tx(conn: Any) -> None:
        conn.execute(
            "INSERT INTO waits (id, run_id, wait_key, kind, name, step_key, token_digest, status, created_at,"
            " expires_at, prompt) VALUES (?, ?, ?, 'approval', 'approve', '', ?, 'pending', ?, ?, ?)",
            (wait_id, run_id, f"op:{wait_id}", secrets.token_bytes(32), T0, expires_at, b'"ok?"'),
        )

    await _db(store).write(tx)
    return wait_id


async def _sql(store: Store, sql: str, params: tuple[Any, ...] = ()) -> list[tuple[Any, ...]]:
    def tx(conn: Any) -> list[tuple[Any, ...]]:
        cur = conn.execute(sql, params)
        return [tuple(r) for r in cur.fetchall()] if cur.description is not None else []

    return await _db(store).write(tx)


async def _queue_row(store: Store, run_id: str) -> tuple[Any, ...] | None:
    rows = await _sql(
        store,
        "SELECT available_at, wake_seq, epoch, node_id, lease_owner FROM queue WHERE run_id = ?",
        (run_id,),
    )
    return rows[0] if rows else None


async def _run_row(store: Store, run_id: str) -> tuple[Any, ...]:
    rows = await _sql(
        store, "SELECT status, waiting_on, attempt, max_attempts FROM runs WHERE id = ?", (run_id,)
    )
    return rows[0]


# -- the runtimes never touch a remote run's queue row ----------------------------------------


async def test_remote_queue_rows_are_invisible_to_the_runtimes(store: Store) -> None:
    due = await _remote_run(store)  # due, unleased
    expired = await _remote_run(store, attempt=2, lease_owner="worker-7", lease_expires_at=T0 - 5)
    held = await _remote_run(store, attempt=1, lease_owner="worker-8", lease_expires_at=T0 + 100)
    later = await _remote_run(store, queued_at=T0 + 50)
    assert not await store.has_ready(now=T0 + 60)
    assert await store.next_due() is None
    assert await store.lease_owners(now=T0) == []
    assert await store.claim("w1", limit=10, now=T0 + 60, lease_ttl=TTL, max_crashes=3) == []
    poll = await store.poll("w1", limit=10, now=T0 + 60, lease_ttl=TTL, max_crashes=3)
    assert poll.claims == [] and poll.next_due is None
    # Heartbeats and freeing dead owners' leases act by owner, and on pyworkflow's rows only.
    assert await store.heartbeat("worker-8", lease_expires_at=T0 + 999) == 0
    assert await store.expire_leases_of(["worker-7", "worker-8"], now=T0) == 0
    if hasattr(store, "claim_run"):  # the Celery runtime's claim (PostgreSQL)
        for run_id in (due, expired, held, later):
            assert await store.claim_run(run_id, "w1", now=T0 + 60, lease_ttl=TTL, max_crashes=3) is None
        assert await store.ready_runs(now=T0 + 60) == []  # type: ignore[attr-defined]
    assert await _queue_row(store, due) == (T0, 0, 0, NODE, None)
    assert await _queue_row(store, expired) == (T0, 0, 2, NODE, "worker-7")
    assert await _queue_row(store, held) == (T0, 0, 1, NODE, "worker-8")
    for run_id in (due, expired, held, later):
        assert (await store.get_run(run_id)).status == RunStatus.PENDING  # type: ignore[union-attr]
    # pyworkflow's own runs are served as before, next to them.
    mine = _id()
    await store.create_run(mine, "wf", b"{}", now=T0 + 10, lease_owner=None, lease_ttl=TTL)
    assert await store.next_due() == T0 + 10
    assert await store.has_ready(now=T0 + 60)
    [claim] = await store.claim("w1", limit=10, now=T0 + 60, lease_ttl=TTL, max_crashes=3)
    assert claim.fence.run_id == mine
    assert await store.lease_owners(now=T0 + 60) == ["w1"]


# -- waking a run: the one rule ---------------------------------------------------------------


async def test_wake_run_continues_a_parked_remote_run_once(store: Store) -> None:
    run_id = await _remote_run(store, status="suspended", attempt=2, max_attempts=3, queued_at=None)
    wait_id = await _approval(store, run_id)
    await _sql(store, "UPDATE runs SET waiting_on = ? WHERE id = ?", (wait_id, run_id))
    assert await _db(store).write(lambda c: wake_run(c, run_id, wait_id, T0 + 5)) == NODE
    assert await _run_row(store, run_id) == ("pending", None, 2, 4)
    assert await _queue_row(store, run_id) == (T0 + 5, 1, 2, NODE, None)
    # Once: the run is no longer parked on the wait.
    assert await _db(store).write(lambda c: wake_run(c, run_id, wait_id, T0 + 6)) is None
    assert await _run_row(store, run_id) == ("pending", None, 2, 4)
    assert await _queue_row(store, run_id) == (T0 + 5, 1, 2, NODE, None)
    # Still nobody else's: pyworkflow's runtimes do not see the continuation either.
    assert await store.claim("w1", limit=10, now=T0 + 60, lease_ttl=TTL, max_crashes=3) == []


async def test_wake_run_leaves_a_remote_run_not_parked_on_that_wait(store: Store) -> None:
    other = _id()
    parked = await _remote_run(store, status="suspended", attempt=1, waiting_on=other, queued_at=None)
    running = await _remote_run(store, status="running", attempt=1, lease_owner="worker-1",
                                lease_expires_at=T0 + 30)  # fmt: skip
    for run_id, wait_id in ((parked, _id()), (parked, None), (running, other)):
        assert await _db(store).write(lambda c, r=run_id, w=wait_id: wake_run(c, r, w, T0 + 5)) is None
    assert await _run_row(store, parked) == ("suspended", other, 1, 3)
    assert await _queue_row(store, parked) is None
    assert await _run_row(store, running) == ("running", None, 1, 3)
    assert await _queue_row(store, running) == (T0, 0, 1, NODE, "worker-1")
    assert await _db(store).write(lambda c: wake_run(c, _id(), None, T0)) is None  # no such run


async def test_wake_run_wakes_a_pyworkflow_run_as_before(store: Store) -> None:
    run_id = _id()
    claim = await store.create_run(run_id, "wf", b"{}", now=T0, lease_owner="w1", lease_ttl=TTL)
    assert claim is not None
    # A turn holds the row: the wake bumps wake_seq (so the turn's end keeps the row).
    assert await _db(store).write(lambda c: wake_run(c, run_id, None, T0 + 1)) is None
    assert await _queue_row(store, run_id) == (T0, 1, 1, None, "w1")
    await store.suspend_run(claim.fence, notified=[], delivered={}, now=T0 + 2)
    assert await _queue_row(store, run_id) == (T0 + 2, 1, 1, None, None)  # kept, due now
    # No row: the wake creates one, due now.
    await _sql(store, "DELETE FROM queue WHERE run_id = ?", (run_id,))
    assert await _db(store).write(lambda c: wake_run(c, run_id, _id(), T0 + 3)) is None
    assert await _queue_row(store, run_id) == (T0 + 3, 1, 0, None, None)
    assert (await store.get_run(run_id)).status == RunStatus.SUSPENDED  # type: ignore[union-attr]


# -- approvals ----------------------------------------------------------------------------------


async def test_expire_due_waits_expires_an_approval_and_continues_its_run(store: Store) -> None:
    run_id = await _remote_run(store, status="suspended", attempt=1, max_attempts=1, queued_at=None)
    wait_id = await _approval(store, run_id, expires_at=T0 + 10)
    await _sql(store, "UPDATE runs SET waiting_on = ? WHERE id = ?", (wait_id, run_id))
    assert await store.next_due() == T0 + 10  # the engine's sweeper sees approvals' deadlines
    assert await store.expire_due_waits(now=T0 + 5) == 0
    assert await store.expire_due_waits(now=T0 + 11) == 1
    wait = await store.get_wait(wait_id)
    assert wait is not None and wait.kind == WaitKind.APPROVAL
    assert wait.status == WaitStatus.EXPIRED and wait.resolved_at == T0 + 11
    assert [e.type for e in await store.get_events(run_id)] == ["wait_expired"]
    assert await _run_row(store, run_id) == ("pending", None, 1, 2)
    assert await _queue_row(store, run_id) == (T0 + 11, 1, 1, NODE, None)
    assert await store.expire_due_waits(now=T0 + 20) == 0
    assert await store.claim("w1", limit=10, now=T0 + 60, lease_ttl=TTL, max_crashes=3) == []


async def test_poll_expires_an_approval_and_continues_its_run(store: Store) -> None:
    # The runtime's tick (PostgreSQL: pyworkflow_poll, one statement) sweeps approvals too.
    run_id = await _remote_run(store, status="suspended", attempt=3, max_attempts=3, queued_at=None)
    wait_id = await _approval(store, run_id, expires_at=T0 + 10)
    await _sql(store, "UPDATE runs SET waiting_on = ? WHERE id = ?", (wait_id, run_id))
    poll = await store.poll("w1", limit=10, now=T0 + 11, lease_ttl=TTL, max_crashes=3)
    assert poll.claims == [] and poll.next_due is None
    assert (await store.get_wait(wait_id)).status == WaitStatus.EXPIRED  # type: ignore[union-attr]
    assert await _run_row(store, run_id) == ("pending", None, 3, 4)
    assert await _queue_row(store, run_id) == (T0 + 11, 1, 3, NODE, None)


async def test_expiry_of_a_wait_the_remote_run_is_not_parked_on(store: Store) -> None:
    run_id = await _remote_run(store, status="suspended", attempt=1, waiting_on=_id(), queued_at=None)
    wait_id = await _approval(store, run_id, expires_at=T0 + 10)
    assert await store.expire_due_waits(now=T0 + 11) == 1
    assert (await store.get_wait(wait_id)).status == WaitStatus.EXPIRED  # type: ignore[union-attr]
    assert (await _run_row(store, run_id))[0] == "suspended"
    assert await _queue_row(store, run_id) is None


async def test_resolve_wait_refuses_an_approval(store: Store) -> None:
    run_id = await _remote_run(store, status="suspended", attempt=1, queued_at=None)
    wait_id = await _approval(store, run_id)
    await _sql(store, "UPDATE runs SET waiting_on = ? WHERE id = ?", (wait_id, run_id))
    [(token,)] = await _sql(store, "SELECT token_digest FROM waits WHERE id = ?", (wait_id,))
    with pytest.raises(HookNotFoundError, match="graph server"):
        await store.resolve_wait(wait_id=wait_id, payload=b'"yes"', now=T0 + 1)
    with pytest.raises(HookNotFoundError, match="graph server"):
        await store.resolve_wait(token_digest=bytes(token), payload=b'"yes"', now=T0 + 1)
    wait = await store.get_wait(wait_id)
    assert wait is not None and wait.status == WaitStatus.PENDING and wait.payload is None
    assert await store.get_events(run_id) == []
    assert await _run_row(store, run_id) == ("suspended", wait_id, 1, 3)
    assert await _queue_row(store, run_id) is None
    assert [w.id for w in await store.list_waits(kinds=[WaitKind.APPROVAL])] == [wait_id]
    assert await store.list_waits(kinds=[WaitKind.STEP_HOOK]) == []


async def test_cancel_a_remote_run(store: Store) -> None:
    run_id = await _remote_run(store, status="running", attempt=1, lease_owner="worker-1",
                               lease_expires_at=T0 + 30)  # fmt: skip
    wait_id = await _approval(store, run_id)
    assert await store.cancel_run(run_id, now=T0 + 1) is True
    assert (await store.get_run(run_id)).status == RunStatus.CANCELLED  # type: ignore[union-attr]
    assert (await store.get_wait(wait_id)).status == WaitStatus.CANCELLED  # type: ignore[union-attr]
    assert await _queue_row(store, run_id) is None
    assert await store.cancel_run(run_id, now=T0 + 2) is False
