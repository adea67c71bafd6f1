"""Every refusal of the graph store's hot transitions, on both dialects: on PostgreSQL they are
server-side functions (atfgraph migration postgres/0008), on SQLite Python write functions, and
both must refuse the same things with the same codes and messages, and write nothing when they
refuse (a reported step, an approval, an audit entry)."""

from __future__ import annotations

import os
import time
from typing import Any

import pytest

from atfgraph._json import dumps
from atfgraph.server._graph_rows import Lease, StepRecord
from atfgraph.server._identity import AuditEntry, Principal, Role
from atfgraph.server._refusals import Conflict, Forbidden, LeaseLost, NotFound, Refusal
from atfgraph.server._store import GraphStore

ON_POSTGRES = os.environ.get("PYWORKFLOW_TEST_STORE", "sqlite") in ("postgresql", "postgres")
WHO = Principal("t1", "alice", Role.OWNER)


async def leased(store: GraphStore, max_attempts: int = 2) -> tuple[str, str, int]:
    """A worker, and a traverser it holds: (worker, traverser, epoch)."""
    worker = (await store.register_worker("n", "1", 4))["id"]
    trav, _ = await store.submit("n.skill", b"{}", max_attempts=max_attempts)
    await store.heartbeat(worker, [], None)  # it answers: claims skip a worker silent for long
    (task,) = await store.claim(worker, 1)
    return worker, trav["id"], int(task["epoch"])


def step(key: str, result: bytes = b"1") -> StepRecord:
    return StepRecord(key, 1, "n.child", "succeeded", result, None)


def steps_of(store: GraphStore, trav: str) -> list[str]:
    return [s["key"] for s in store.path(trav)["steps"]]


def audit_rows(store: GraphStore, action: str) -> list[Any]:
    return store._read(
        lambda c: c.execute(
            "SELECT target, outcome, detail FROM atfg_audit WHERE action = ? ORDER BY id", (action,)
        ).fetchall()
    )


def refused(exc: pytest.ExceptionInfo[Refusal]) -> tuple[type, str, str]:
    return type(exc.value), exc.value.code, exc.value.message


async def test_a_stale_epoch_is_refused_everywhere_and_writes_nothing(store: GraphStore) -> None:
    _, trav, epoch = await leased(store)
    stale = epoch - 1
    calls = [
        store.save_checkpoint(trav, stale, "c", b"1", None, [step("a")]),
        store.request_approval(trav, stale, "k", b"1", None, None, True, [step("a")]),
        store.complete(trav, stale, b"1", [step("a")]),
        store.fail(trav, stale, b'{"code":"x"}', True, [step("a")]),
        store.release(trav, stale, [step("a")]),
    ]
    for call in calls:
        with pytest.raises(Refusal) as exc:
            await call
        assert refused(exc) == (LeaseLost, "lease_lost", LeaseLost.of(trav).message)
    assert steps_of(store, trav) == []
    assert store.list_approvals(None, trav, 10) == []
    view = store.get_traverser(trav)
    assert (view["status"], view["attempt"]) == ("running", 1)


async def test_an_expired_lease_is_refused_before_the_reaper_runs(location: str) -> None:
    store = GraphStore(location, lease_seconds=0.1)
    try:
        _, trav, epoch = await leased(store)
        time.sleep(0.15)
        with pytest.raises(LeaseLost):
            await store.save_checkpoint(trav, epoch, "c", b"1", None, [step("a")])
        with pytest.raises(LeaseLost):
            await store.complete(trav, epoch, b"1", [])
        assert steps_of(store, trav) == []
        assert store.get_traverser(trav)["status"] == "running"
    finally:
        store.close()


async def test_unknown_traversers_workers_and_approvals_are_not_found(store: GraphStore) -> None:
    for call in (
        store.save_checkpoint("nope", 1, "c", b"1", None, []),
        store.complete("nope", 1, b"1", []),
        store.request_approval("nope", None, "k", b"1", None, None, False, []),
        store.request_approval("nope", 1, "k", b"1", None, None, True, []),
        store.claim("nope", 1),
        store.decide("nope", "approved", None, "alice"),
    ):
        with pytest.raises(NotFound):
            await call


async def test_a_revision_conflict_records_no_steps(store: GraphStore) -> None:
    _, trav, epoch = await leased(store)
    assert await store.save_checkpoint(trav, epoch, "c", b"1", 0, [step("a")]) == 1
    with pytest.raises(Refusal) as exc:
        await store.save_checkpoint(trav, epoch, "c", b"2", 5, [step("b")])
    assert refused(exc) == (
        Conflict,
        "revision_conflict",
        "checkpoint 'c' is at revision 1, not the expected 5",
    )
    assert steps_of(store, trav) == ["a"]
    assert await store.save_checkpoint(trav, epoch, "c", b"3", None, [step("a", b"2"), step("b")]) == 2
    assert steps_of(store, trav) == ["a", "b"]  # a step already recorded is never overwritten
    assert dumps(store.path(trav)["steps"][0]["result"]) == b"1"


async def test_an_operation_key_with_another_prompt_is_refused(store: GraphStore) -> None:
    _, trav, epoch = await leased(store)
    first, paused = await store.request_approval(trav, None, "k", b'{"a":1,"b":2}', None, None, False, [])
    assert not paused
    with pytest.raises(Refusal) as exc:
        await store.request_approval(trav, epoch, "k", b'{"a":2}', None, None, True, [step("s")])
    assert refused(exc)[:2] == (Conflict, "approval_conflict")
    assert steps_of(store, trav) == [] and store.get_traverser(trav)["status"] == "running"
    # The same prompt written with other bytes is the same prompt: found, and the pause happens.
    again, paused = await store.request_approval(
        trav, epoch, "k", b'{ "b": 2, "a": 1 }', None, None, True, [step("s")]
    )
    assert paused and again["id"] == first["id"]
    assert steps_of(store, trav) == ["s"]
    assert store.get_traverser(trav)["status"] == "waiting"


async def test_a_pause_needs_the_lease_and_a_finished_traverser_takes_no_approvals(store: GraphStore) -> None:
    _, trav, epoch = await leased(store)
    with pytest.raises(Refusal) as exc:
        await store.request_approval(trav, None, "k", b"1", None, None, True, [])
    assert refused(exc) == (
        Conflict,
        "lease_required",
        "pausing a traverser requires its task lease (epoch)",
    )
    await store.complete(trav, epoch, b"1", [])
    with pytest.raises(Refusal) as exc:
        await store.request_approval(trav, None, "k", b"1", None, None, False, [])
    assert refused(exc) == (Conflict, "invalid_state", f"traverser {trav!r} is succeeded")
    assert store.list_approvals(None, trav, 10) == []


async def test_decisions_are_audited_idempotent_and_never_two(location: str, store: GraphStore) -> None:
    _, trav, epoch = await leased(store)
    request = AuditEntry(WHO, "approval.request", None, "allowed", {"traverser_id": trav})
    approval, _ = await store.request_approval(trav, epoch, "k", b'"p"', b'{"s":1}', None, True, [], request)
    assert [r[0] for r in audit_rows(store, "approval.request")] == [approval["id"]]
    audit = AuditEntry(WHO, "approval.decide", approval["id"], "allowed")
    # A store that never saw the approval (another server): the decision finds its run.
    other = GraphStore(location)
    try:
        decided, node = await other.decide(approval["id"], "approved", b'{"ok": 1}', "alice", audit)
    finally:
        other.close()
    assert (decided["status"], decided["decided_by"], node) == ("approved", "alice", "n")
    assert dumps(decided["response"]) == b'{"ok": 1}'
    view = store.get_traverser(trav)
    assert (view["status"], view["max_attempts"]) == ("queued", 3)
    # The same decision again: accepted, audited with the stored response, nothing queued twice.
    same, node = await store.decide(approval["id"], "approved", b'{"ok": 1}', "bob", audit)
    assert (same["decided_by"], node) == ("alice", None)
    again, node = await store.decide(approval["id"], "approved", None, "bob", audit)
    assert (again["decided_by"], node) == ("alice", None)
    with pytest.raises(Refusal) as exc:
        await store.decide(approval["id"], "rejected", None, "bob", audit)
    assert refused(exc) == (Conflict, "approval_decided", f"approval {approval['id']!r} is already approved")
    details = [bytes(r[2]) for r in audit_rows(store, "approval.decide")]
    assert details == [b'{"decision":"approved","response":{"ok": 1}}'] * 3
    assert store.get_traverser(trav)["max_attempts"] == 3


async def test_fail_and_release_end_the_attempt_by_the_rules(store: GraphStore) -> None:
    worker, trav, epoch = await leased(store, max_attempts=2)
    assert await store.fail(trav, epoch, b'{"code":"e1"}', True, [step("a")]) == "queued"
    view = store.get_traverser(trav)
    assert (view["status"], dumps(view["error"]), view["max_attempts"]) == ("queued", b'{"code":"e1"}', 2)
    (task,) = await store.claim(worker, 1)
    assert [s["key"] for s in task["steps"]] == ["a"]
    await store.release(trav, int(task["epoch"]), [])
    view = store.get_traverser(trav)
    assert (view["status"], dumps(view["error"]), view["max_attempts"]) == ("queued", b'{"code":"e1"}', 3)
    (task,) = await store.claim(worker, 1)
    assert await store.fail(trav, int(task["epoch"]), b'{"code":"e2"}', False, []) == "failed"
    view = store.get_traverser(trav)
    assert (view["status"], dumps(view["error"]), view["attempt"]) == ("failed", b'{"code":"e2"}', 3)
    assert store.get_traverser(trav)["finished_at"] is not None


async def test_a_claim_hands_over_stored_bytes_unchanged(store: GraphStore) -> None:
    worker, trav, epoch = await leased(store)
    await store.save_checkpoint(
        trav, epoch, "c", b'{"x": 1.0, "y": [1e2]}', None, [step("a", b'{"r": 2.50}')]
    )
    await store.request_approval(trav, epoch, "k", b'{"q": 1.0}', b"[1, 2]", 60.0, True, [])
    approval = store.list_approvals("pending", trav, 1)[0]
    await store.decide(approval["id"], "approved", b'{"a": 0.10}', "alice")
    (task,) = await store.claim(worker, 1)
    assert dumps(task["checkpoints"]) == b'{"c":{"value":{"x": 1.0, "y": [1e2]},"revision":1}}'
    assert dumps(task["steps"][0]["result"]) == b'{"r": 2.50}'
    (got,) = task["approvals"]
    assert (dumps(got["prompt"]), dumps(got["checkpoint"]), dumps(got["response"])) == (
        b'{"q": 1.0}',
        b"[1, 2]",
        b'{"a": 0.10}',
    )
    assert dumps(got) == dumps(store.get_approval(approval["id"]))
    assert dumps(task["traverser"]) == dumps(store.get_traverser(trav))


async def test_a_write_under_another_workers_lease_is_forbidden_with_or_without_a_read(
    store: GraphStore,
) -> None:
    """check_lease for a write (live=False) answers from the leases this server handed out, and
    reads the traverser for one it did not (another server's, or forgotten): both refuse a lease
    named by a worker that does not hold it, accept the holder, and leave liveness to the write."""
    worker, trav, epoch = await leased(store)
    other = (await store.register_worker("n", "1", 4))["id"]
    for remembered in (True, False):
        if not remembered:
            store._lease_holders.clear()
        with pytest.raises(Forbidden):
            await store.check_lease(Lease(trav, epoch, other), live=False)
        await store.check_lease(Lease(trav, epoch, worker), live=False)
    # A read (live=True) still checks the lease is live: a made-up epoch is lost.
    with pytest.raises(LeaseLost):
        await store.check_lease(Lease(trav, epoch + 7, worker))
