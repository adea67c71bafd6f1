"""The graph store's transitions on a temporary SQLite file (or, with
``PYWORKFLOW_TEST_STORE=postgresql``, a new PostgreSQL database): one transaction each, fenced by
the lease epoch, indexed lookups only."""

from __future__ import annotations

import asyncio
import os
import time
from collections.abc import AsyncIterator
from typing import Any

import pytest

from atfgraph._json import dumps
from atfgraph.server._refusals import Conflict, Refusal
from atfgraph.server._store import GraphStore

ON_POSTGRES = os.environ.get("PYWORKFLOW_TEST_STORE", "sqlite") in ("postgresql", "postgres")


@pytest.fixture
async def store(location: str) -> AsyncIterator[GraphStore]:
    # A lease far longer than any test step: these workers never heartbeat, and one silent for
    # SILENT_AFTER leases gets no claims (the expiry tests make their own short-lease store).
    s = GraphStore(location, lease_seconds=30.0)
    yield s
    s.close()


async def claim_one(store: GraphStore, worker: str) -> dict[str, object]:
    tasks = await store.claim(worker, 1)
    assert len(tasks) == 1
    return tasks[0]


APPROVED = "w.status = ? AND w.decision = ?"
AFTER_ASC = " AND (w.created_at > ? OR (w.created_at = ? AND w.id > ?))"
AFTER_DESC = " AND (r.created_at < ? OR (r.created_at = ? AND r.id < ?))"
HOT_QUERIES: list[tuple[str, tuple[object, ...]] | tuple[str, tuple[object, ...], str]] = [
    ("SQL_READY", ("n", 0.0, "1", 1)),
    ("SQL_EXPIRED_LEASES", (0.0, 10)),
    # The sweeper's first read, every tick: three lookups that stop at their first entry.
    ("SQL_SWEEP_DUE", (0.0, 0.0, 0.0)),
    ("SQL_LIST_APPROVALS", ("pending", 10), " AND w.status = ?"),
    ("SQL_LIST_APPROVALS", (10,)),
    ("SQL_LIST_APPROVALS", ("received", "approved", 10), " AND " + APPROVED),
    ("SQL_LIST_APPROVALS", ("t", 10), " AND w.run_id = ?"),
    # A later page: the cursor's condition (_paging.keyset) keeps to the same index.
    ("SQL_LIST_APPROVALS", ("pending", 1.0, 1.0, "a", 10), " AND w.status = ?" + AFTER_ASC),
    ("SQL_APPROVAL_BY_KEY", ("t", "k")),
    ("SQL_APPROVALS_OF", ("t",)),
    ("SQL_STEPS", ("t",)),
    ("SQL_CHECKPOINTS", ("t",)),
    ("SQL_LIST_TRAVERSERS", ("suspended", 10)),
    ("SQL_LIST_TRAVERSERS", ("suspended", 1.0, 1.0, "a", 10), AFTER_DESC),
    ("SQL_LOCK_TRAVERSER", ("t",)),
    ("SQL_LOCK_APPROVAL", ("a",)),
    # An earlier submission by key: runs_by_idempotency_key, partial (keyed runs only).
    ("SQL_TRAVERSER_BY_KEY", ("k",)),
]


def _queries(sql: Any) -> list[tuple[str, tuple[object, ...], str]]:
    """Each hot query with its conditions and the order its listing uses (``_paging.keyset``)."""
    assert sql.APPROVAL_STATUS_WHERE["approved"][0] == APPROVED
    out = []
    for name, params, *where in HOT_QUERIES:
        order = (
            " ORDER BY w.created_at ASC, w.id ASC"
            if "APPROVALS" in name
            else " ORDER BY r.created_at DESC, r.id DESC"
        )
        out.append((name, params, getattr(sql, name).format(where="".join(where), order=order)))
    return out


async def test_tables_are_prefixed_and_hot_queries_use_indexes(store: GraphStore) -> None:
    if ON_POSTGRES:
        tables = "SELECT table_name FROM information_schema.tables WHERE table_schema = 'public'"
    else:
        tables = "SELECT name FROM sqlite_master WHERE type='table'"
    names = store.db.read(lambda c: [r[0] for r in c.execute(tables)])
    # The graph's tables and identity's are prefixed; the rest are pyworkflow's, which share the
    # file so that one inbox shows pyworkflow hooks beside approvals.
    assert sorted(n for n in names if n.startswith("atfg_")) == [
        "atfg_assignments",
        "atfg_audit",
        "atfg_checkpoint_revisions",
        "atfg_console_sessions",
        "atfg_deliveries",
        "atfg_memory",
        "atfg_server_keys",
        "atfg_tokens",
        "atfg_wait_events",
        "atfg_wait_links",
        "atfg_workers",
    ]
    pyworkflow_tables = {"checkpoints", "events", "queue", "runs", "steps", "wait_tokens", "waits"}
    assert {n for n in names if not n.startswith("atfg_")} - {"sqlite_sequence"} == pyworkflow_tables | {
        "schema_migrations"
    }
    from atfgraph.server import _graph_sql as sql

    if ON_POSTGRES:
        # With sequential scans priced out, a query no index serves still plans a "Seq Scan".
        for name, params, query in _queries(sql):

            def explain(c: object, q: str = query, p: tuple[object, ...] = params) -> list[str]:
                c.execute("SET LOCAL enable_seqscan = off")  # type: ignore[attr-defined]
                return [str(r[0]) for r in c.execute("EXPLAIN " + q, p).fetchall()]  # type: ignore[attr-defined]

            plan = store.db.read(explain)
            assert not [line for line in plan if "Seq Scan" in line], (name, plan)
            assert any("Index" in line for line in plan), (name, plan)
        return
    for _name, params, query in _queries(sql):
        plan = store.db.read(lambda c, q=query, p=params: c.execute("EXPLAIN QUERY PLAN " + q, p).fetchall())
        details = [str(row[-1]) for row in plan]
        # "SCAN t USING INDEX i" walks an index in order (bounded by LIMIT); a bare SCAN reads a table
        # ("SCAN CONSTANT ROW" is a SELECT without a table, around subqueries).
        scans = [d for d in details if d.startswith("SCAN") and "USING" not in d and d != "SCAN CONSTANT ROW"]
        assert not scans, (query, details)
        assert any("INDEX" in d or "PRIMARY KEY" in d for d in details), (query, details)


async def test_pause_decide_continue(store: GraphStore) -> None:
    worker = (await store.register_worker("n", "1.0", 2))["id"]
    trav, _ = await store.submit("n.skill", b"{}", max_attempts=1)
    task = await claim_one(store, worker)
    epoch = task["epoch"]
    assert isinstance(epoch, int)
    approval, paused = await store.request_approval(trav["id"], epoch, "k", b'"p"', None, None, True, [])
    assert paused and approval["status"] == "pending"
    view = store.get_traverser(trav["id"])
    assert (view["status"], view["waiting_on"]) == ("waiting", approval["id"])
    # The pause closed the lease: the old epoch can no longer write.
    with pytest.raises(Refusal) as lost:
        await store.save_checkpoint(trav["id"], epoch, "c", b"1", None, [])
    assert lost.value.code == "lease_lost"

    decided, node = await store.decide(approval["id"], "approved", b'{"ok":1}', "owner")
    assert (decided["status"], node) == ("approved", "n")
    view = store.get_traverser(trav["id"])
    assert (view["status"], view["max_attempts"]) == ("queued", 2)
    again = await claim_one(store, worker)
    assert again["epoch"] == epoch + 1
    assert [a["status"] for a in again["approvals"]] == ["approved"]  # type: ignore[union-attr]
    assert store.get_traverser(trav["id"])["attempt"] == 2


async def test_version_is_pinned_by_the_first_claim(store: GraphStore) -> None:
    v1 = (await store.register_worker("n", "1", 1))["id"]
    v2 = (await store.register_worker("n", "2", 1))["id"]
    trav, _ = await store.submit("n.skill", b"{}", max_attempts=3)
    task = await claim_one(store, v1)
    await store.request_approval(trav["id"], task["epoch"], "k", b"1", None, None, True, [])  # type: ignore[arg-type]
    approval = store.list_approvals("pending", trav["id"], 10)[0]
    await store.decide(approval["id"], "approved", None, "owner")
    assert await store.claim(v2, 5) == []
    assert (await claim_one(store, v1))["traverser"]["version"] == "1"  # type: ignore[index]


async def test_decision_racing_expiry_has_one_winner(store: GraphStore) -> None:
    worker = (await store.register_worker("n", "1", 1))["id"]
    trav, _ = await store.submit("n.skill", b"{}", max_attempts=1)
    task = await claim_one(store, worker)
    approval, _ = await store.request_approval(trav["id"], task["epoch"], "k", b"1", None, 0.0, True, [])  # type: ignore[arg-type]
    decide = asyncio.ensure_future(store.decide(approval["id"], "approved", None, "owner"))
    sweep = asyncio.ensure_future(store.sweep())
    results = await asyncio.gather(decide, sweep, return_exceptions=True)
    final = store.get_approval(approval["id"])
    assert final["status"] in ("approved", "expired")
    if final["status"] == "expired":
        assert isinstance(results[0], Refusal) and results[0].code == "approval_decided"
    view = store.get_traverser(trav["id"])
    assert (view["status"], view["max_attempts"]) == ("queued", 2)  # continued exactly once


async def test_expired_lease_is_retried_then_failed(location: str) -> None:
    store = GraphStore(location, lease_seconds=0.2)
    try:
        await _retried_then_failed(store)
    finally:
        store.close()


async def _retried_then_failed(store: GraphStore) -> None:
    worker = (await store.register_worker("n", "1", 1))["id"]
    trav, _ = await store.submit("n.skill", b"{}", max_attempts=2)
    first = await claim_one(store, worker)
    time.sleep(0.25)
    await store.sweep()
    assert store.get_traverser(trav["id"])["status"] == "queued"
    with pytest.raises(Refusal):  # the old attempt is fenced off
        await store.complete(trav["id"], first["epoch"], b"1", [])  # type: ignore[arg-type]
    # Silent for more than SILENT_AFTER leases (no heartbeat): claims in its name get nothing,
    # until it answers again.
    assert await store.claim(worker, 1) == []
    assert await store.heartbeat(worker, [], None) == ([], True)
    await claim_one(store, worker)
    time.sleep(0.25)
    await store.sweep()
    view = store.get_traverser(trav["id"])
    assert view["status"] == "failed" and view["attempt"] == 2


async def test_heartbeat_extends_only_held_leases(location: str) -> None:
    store = GraphStore(location, lease_seconds=1.0)
    try:
        worker = (await store.register_worker("n", "1", 1))["id"]
        trav, _ = await store.submit("n.skill", b"{}", max_attempts=2)
        epoch = (await claim_one(store, worker))["epoch"]
        assert isinstance(epoch, int)
        assert await store.heartbeat(worker, [(trav["id"], epoch), ("other", 1)], dumps({})) == (
            ["other"],
            False,
        )
        # (Only the lost leases are checked from here: whether the worker counts as having been
        # silent depends on how long the sleeps really took on a loaded machine.)
        time.sleep(0.6)
        assert (await store.heartbeat(worker, [(trav["id"], epoch)], None))[0] == []
        time.sleep(0.6)  # past the first deadline, well before the renewed one
        await store.sweep()
        assert store.get_traverser(trav["id"])["status"] == "running"
        assert (await store.heartbeat(worker, [(trav["id"], epoch - 1)], None))[0] == [trav["id"]]  # fenced
    finally:
        store.close()


async def test_checkpoint_compare_and_set(store: GraphStore) -> None:
    worker = (await store.register_worker("n", "1", 1))["id"]
    trav, _ = await store.submit("n.skill", b"{}", max_attempts=2)
    epoch = (await claim_one(store, worker))["epoch"]
    assert isinstance(epoch, int)
    assert await store.save_checkpoint(trav["id"], epoch, "c", b"1", 0, []) == 1
    for stale in (0, 2):
        with pytest.raises(Refusal) as conflict:
            await store.save_checkpoint(trav["id"], epoch, "c", b"2", stale, [])
        assert (type(conflict.value), conflict.value.code) == (Conflict, "revision_conflict")
    assert await store.save_checkpoint(trav["id"], epoch, "c", b"3", 1, []) == 2
    assert store.get_checkpoint(trav["id"], "c")["revision"] == 2


async def test_idempotent_submission(store: GraphStore) -> None:
    first, created = await store.submit("n.skill", b'{"a":1}', 3, "key-1")
    again, created_again = await store.submit("n.skill", b'{"a": 1}', 3, "key-1")
    assert (created, created_again) == (True, False) and again["id"] == first["id"]
    other, _ = await store.submit("n.skill", b'{"a":1}', 3, None)
    assert other["id"] != first["id"]
    for target, payload in (("n.other", b'{"a":1}'), ("n.skill", b'{"a":2}')):
        with pytest.raises(Refusal) as conflict:
            await store.submit(target, payload, 3, "key-1")
        assert (type(conflict.value), conflict.value.code) == (Conflict, "idempotency_conflict")


async def test_a_stopping_worker_gives_back_leases_it_never_read(store: GraphStore) -> None:
    """The claim answer was lost (the worker stopped mid-read): release_all requeues the task at
    once without charging the attempt, and touches no other worker's lease."""
    mine = (await store.register_worker("n", "1", 2))["id"]
    other = (await store.register_worker("n", "1", 2))["id"]
    lost, _ = await store.submit("n.skill", b"{}", max_attempts=1)
    await claim_one(store, mine)
    kept, _ = await store.submit("n.skill", b"{}", max_attempts=1)
    await claim_one(store, other)
    assert await store.release_all(mine) == ["n"]
    view = store.get_traverser(lost["id"])
    assert (view["status"], view["attempt"], view["max_attempts"]) == ("queued", 1, 2)
    assert store.get_traverser(kept["id"])["status"] == "running"
    assert await store.release_all(mine) == []
    again = await claim_one(store, other)
    assert again["traverser"]["id"] == lost["id"]


async def test_listing_approvals_in_a_status_limits_after_filtering(store: GraphStore) -> None:
    """The limit counts approvals in the status asked for (it was applied before the filter)."""
    worker = (await store.register_worker("n", "1.0", 8))["id"]
    ids = []
    for k in range(4):
        trav, _ = await store.submit("n.skill", b"{}", max_attempts=1, idempotency_key=f"k{k}")
        epoch = (await claim_one(store, worker))["epoch"]
        approval, _ = await store.request_approval(trav["id"], epoch, "ok", b"{}", None, None, True, [])
        ids.append(approval["id"])
    for approval_id in ids[2:]:  # the two newest approved, the two oldest still pending
        await store.decide(approval_id, "approved", None, "alice")
    for limit in (1, 2, 3):
        approved = store.list_approvals("approved", None, limit)
        assert [a["id"] for a in approved] == ids[2:][:limit]
    assert [a["id"] for a in store.list_approvals("pending", None, 1)] == ids[:1]
    assert [a["id"] for a in store.list_approvals(None, None, 3)] == ids[:3]
