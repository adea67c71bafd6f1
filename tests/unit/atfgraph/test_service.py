"""The service functions (``atfgraph.server._service``): each transition and its audit entry commit
together or not at all, a refusal changes nothing but is recorded, and whoever waits is woken.
On a temporary SQLite file, or with ``PYWORKFLOW_TEST_STORE=postgresql`` a new PostgreSQL
database."""

from __future__ import annotations

import asyncio
import math
import os
import time
from typing import Any

import pytest

import pyworkflow
from atfgraph._json import dumps
from atfgraph.server._assign import Assignees, Escalation, read_assignment
from atfgraph.server._hub import node_key, traverser_key
from atfgraph.server._identity import Principal, Role
from atfgraph.server._refusals import Conflict, Forbidden, Invalid, NotFound
from atfgraph.server._service import Service
from counted import counted_calls
from pyworkflow.store import NewWait, WaitKind, WaitStatus

ON_POSTGRES = os.environ.get("PYWORKFLOW_TEST_STORE", "sqlite") in ("postgresql", "postgres")
ALICE = Principal("t-alice", "alice", Role.REVIEWER)
OWNER = Principal("t-owner", "olga", Role.OWNER)
WORKER = Principal("t-worker", "w1", Role.WORKER)


async def paused(service: Service) -> tuple[dict[str, Any], dict[str, Any]]:
    """A traverser paused on a pending approval: (traverser, approval)."""
    store = service.store
    trav, _ = await service.submit(OWNER, "desk.refund", dumps({"amount": 480}), 3)
    worker = (await store.register_worker("desk", "1", 1))["id"]
    task = (await store.claim(worker, 1))[0]
    approval, was_paused, _ = await service.request_approval(
        WORKER, trav["id"], task["epoch"], "refund", b'{"question":"ok?"}', None, None, True
    )
    assert was_paused and approval["status"] == "pending"
    return trav, approval


def audit_rows(service: Service) -> list[tuple[Any, ...]]:
    sql = "SELECT principal, action, target, outcome FROM atfg_audit ORDER BY id"
    return service.store.db.read(lambda c: [tuple(r) for r in c.execute(sql).fetchall()])


def break_audit(service: Service) -> None:
    """Make every audit insert fail from now on (the database refuses the row)."""
    if ON_POSTGRES:
        ddl = [
            "CREATE FUNCTION atfg_test_no_audit() RETURNS trigger LANGUAGE plpgsql AS"
            " $$ BEGIN RAISE EXCEPTION 'audit refused'; END $$",
            "CREATE TRIGGER no_audit BEFORE INSERT ON atfg_audit FOR EACH ROW"
            " EXECUTE FUNCTION atfg_test_no_audit()",
        ]
    else:
        ddl = [
            "CREATE TRIGGER no_audit BEFORE INSERT ON atfg_audit"
            " BEGIN SELECT RAISE(ABORT, 'audit refused'); END"
        ]

    def tx(conn: Any) -> None:
        for statement in ddl:
            conn.execute(statement)

    service.store.db.write_sync(tx)


async def test_each_change_commits_its_audit_entry(service: Service) -> None:
    trav, approval = await paused(service)
    decided = await service.decide(ALICE, approval["id"], "approved", b'{"note":"fine"}')
    assert decided["status"] == "approved" and decided["decided_by"] == "alice"
    cancelled = await service.cancel(OWNER, trav["id"])
    assert cancelled["status"] == "cancelled"
    assert audit_rows(service) == [
        ("olga", "traverser.submit", trav["id"], "allowed"),
        ("w1", "approval.request", approval["id"], "allowed"),
        ("alice", "approval.decide", approval["id"], "allowed"),
        ("olga", "traverser.cancel", trav["id"], "allowed"),
    ]
    detail = service.store.db.read(
        lambda c: c.execute("SELECT detail FROM atfg_audit WHERE action = 'approval.decide'").fetchone()[0]
    )
    assert bytes(detail) == b'{"decision":"approved","response":{"note":"fine"}}'


async def test_a_change_whose_audit_entry_fails_does_not_commit(service: Service) -> None:
    trav, approval = await paused(service)
    break_audit(service)
    with pytest.raises(Exception, match="audit refused"):
        await service.decide(ALICE, approval["id"], "approved", None)
    assert service.store.get_approval(approval["id"])["status"] == "pending"
    assert service.store.get_traverser(trav["id"])["status"] == "waiting"
    with pytest.raises(Exception, match="audit refused"):
        await service.cancel(OWNER, trav["id"])
    assert service.store.get_traverser(trav["id"])["status"] == "waiting"
    with pytest.raises(Exception, match="audit refused"):
        await service.submit(OWNER, "desk.refund", b"{}", 3)
    assert service.store.list_traversers("queued", 10) == []


async def test_refusals_change_nothing_and_are_recorded(service: Service) -> None:
    _, approval = await paused(service)
    await service.decide(ALICE, approval["id"], "approved", None)
    again = await service.decide(ALICE, approval["id"], "approved", None)  # idempotent repeat
    assert again["status"] == "approved"
    with pytest.raises(Conflict) as refused:
        await service.decide(ALICE, approval["id"], "rejected", None)
    assert refused.value.code == "approval_decided"
    with pytest.raises(NotFound):
        await service.decide(ALICE, "nope", "approved", None)
    with pytest.raises(Invalid):
        await service.decide(ALICE, approval["id"], "maybe", None)
    assert service.store.get_approval(approval["id"])["status"] == "approved"
    outcomes = [(r[1], r[2], r[3]) for r in audit_rows(service) if r[1] == "approval.decide"]
    assert outcomes == [
        ("approval.decide", approval["id"], "allowed"),
        ("approval.decide", approval["id"], "allowed"),
        ("approval.decide", approval["id"], "refused"),
        ("approval.decide", "nope", "refused"),
    ]


async def test_a_decision_wakes_the_node_and_the_traverser_followers(service: Service) -> None:
    trav, approval = await paused(service)
    hub = service.hub
    node_waiter = hub.subscribe(node_key("desk"))
    follower = hub.subscribe(traverser_key(trav["id"]))
    await service.decide(ALICE, approval["id"], "approved", None)
    assert await hub.wait(node_waiter, 1.0) and await hub.wait(follower, 1.0)
    assert service.store.get_traverser(trav["id"])["status"] == "queued"


async def test_resume_hook_refuses_what_is_not_a_pending_hook(service: Service) -> None:
    _, approval = await paused(service)
    for ident in ("no-such-hook", approval["id"], "x" * 300):
        with pytest.raises(NotFound):
            await service.resume_hook(ALICE, ident, {"ok": True})
    await asyncio.sleep(0)
    assert [r for r in audit_rows(service) if r[1] == "hook.resume"] == []


async def pending_hook(service: Service) -> str:
    """A pyworkflow run in the server's database suspended on a hook: the hook's id."""
    store = service.store.pyworkflow
    now = time.time()
    claim = await store.create_run("run-1", "tests:wf", b"{}", now=now, lease_owner="me", lease_ttl=30)
    assert claim is not None
    wait = NewWait("hook-1", "h#1", WaitKind.HOOK, "approve", "", b"digest-1", None, None)
    await store.create_wait(claim.fence, wait, now=now)
    await store.suspend_run(claim.fence, notified=["hook-1"], delivered={}, now=now)
    return "hook-1"


async def test_a_resumed_hook_commits_with_its_audit_entry(service: Service) -> None:
    hook_id = await pending_hook(service)
    resolved = await service.resume_hook(ALICE, hook_id, {"ok": True})
    assert resolved.status == WaitStatus.RECEIVED
    assert [r for r in audit_rows(service) if r[1] == "hook.resume"] == [
        ("alice", "hook.resume", hook_id, "allowed")
    ]
    with pytest.raises(Conflict) as again:
        await service.resume_hook(ALICE, hook_id, {"ok": False})
    assert again.value.code == "hook_not_pending"
    assert [r[3] for r in audit_rows(service) if r[1] == "hook.resume"] == ["allowed", "refused"]


async def test_a_hook_resume_whose_audit_entry_fails_does_not_commit(service: Service) -> None:
    hook_id = await pending_hook(service)
    break_audit(service)
    with pytest.raises(Exception, match="audit refused"):
        await service.resume_hook(ALICE, hook_id, {"ok": True})
    wait = await service.store.pyworkflow.get_wait(hook_id)
    assert wait is not None and wait.status == WaitStatus.PENDING and wait.payload is None


@pyworkflow.workflow(name="service-test:answer")
async def answering() -> Any:
    return await pyworkflow.hook("answer")


async def test_resume_hook_refuses_a_payload_that_would_not_come_back_exactly(
    service: Service, location: str
) -> None:
    """A direct caller (HTTP and the console refuse such numbers before this) gets a 422-kind
    refusal, recorded, and the hook stays pending."""
    pyworkflow.configure(storage=location if ON_POSTGRES else f"sqlite:///{location}", poll_interval=0.02)
    try:
        run_id = await pyworkflow.start(answering)
        await pyworkflow.wait_for_run(run_id, 10, until=("suspended",))
        (hook,) = await pyworkflow.list_pending_hooks()
        for payload in ({"ratio": math.nan}, {"account": 2**64 + 1}):
            with pytest.raises(Invalid) as refused:
                await service.resume_hook(ALICE, hook.hook_id, payload)
            assert refused.value.code == "validation_error"
            assert refused.value.message.startswith("payload cannot be stored as JSON: $.")
        assert [h.hook_id for h in await pyworkflow.list_pending_hooks()] == [hook.hook_id]
        outcomes = [(r[1], r[3]) for r in audit_rows(service) if r[1] == "hook.resume"]
        assert outcomes == [("hook.resume", "refused"), ("hook.resume", "refused")]
    finally:
        await pyworkflow.shutdown()


async def escalating(service: Service) -> dict[str, Any]:
    """A traverser paused on an approval assigned to rita that escalates to boss after 60 s (then
    600 s more): the approval."""
    store = service.store
    trav, _ = await service.submit(OWNER, "desk.refund", dumps({"amount": 480}), 3)
    worker = (await store.register_worker("desk", "1", 1))["id"]
    task = (await store.claim(worker, 1))[0]
    approval, _, _ = await service.request_approval(
        WORKER, trav["id"], task["epoch"], "refund", b'{"question":"ok?"}', None, 60, True,
        assign_to=Assignees((), ("rita",)), escalate=Escalation(Assignees((), ("boss",)), 600),
    )  # fmt: skip
    return approval


async def test_an_approval_that_escalates_has_the_deadline_it_has_if_the_escalation_comes_on_time(
    service: Service,
) -> None:
    approval = await escalating(service)
    assignment = service.store.db.read(lambda c: read_assignment(c, approval["id"]))
    assert assignment is not None and assignment["escalations"] == 0
    escalates_at = assignment["escalates_at"]
    assert approval["created_at"] + 60 - 0.01 <= escalates_at <= approval["created_at"] + 60 + 0.01
    assert approval["expires_at"] == pytest.approx(escalates_at + 600, abs=1e-6)
    assert assignment["escalates_at_iso"].endswith("Z")


async def test_no_expiry_of_the_engines_preempts_an_escalation(
    service: Service, monkeypatch: pytest.MonkeyPatch
) -> None:
    """Past its escalation's deadline but not yet escalated, an approval is not expired by the
    engine's sweep, whoever runs it (a pyworkflow runtime on the same database expires the waits
    of every kind): the graph server's next sweep escalates it."""
    store = service.store
    approval = await escalating(service)
    escalates_at = store.db.read(lambda c: read_assignment(c, approval["id"]))["escalates_at"]
    assert await store.pyworkflow.expire_due_waits(now=escalates_at + 1) == 0
    monkeypatch.setattr(time, "time", lambda: escalates_at + 1)
    await store.sweep()
    monkeypatch.undo()
    wait = await store.pyworkflow.get_wait(approval["id"])
    assert wait is not None and wait.status == WaitStatus.PENDING
    assert wait.expires_at == pytest.approx(escalates_at + 1 + 600)
    assignment = store.db.read(lambda c: read_assignment(c, approval["id"]))
    assert assignment is not None
    assert (assignment["principals"], assignment["escalations"], assignment["escalates_at"]) == (
        ["boss"], 1, None,
    )  # fmt: skip
    assert await store.pyworkflow.expire_due_waits(now=escalates_at + 602) == 1  # then it expires


async def test_an_approval_due_to_escalate_escalates_when_its_deadline_falls_during_a_sweep(
    service: Service, monkeypatch: pytest.MonkeyPatch
) -> None:
    """A sweep escalates, then expires, what fell due by one instant: an escalation that falls
    due while the sweep works (the clock moves on while its escalations commit) is escalated by
    the next sweep, never expired (a race that lost escalations under load)."""
    store = service.store
    approval = await escalating(service)
    escalates_at = store.db.read(lambda c: read_assignment(c, approval["id"]))["escalates_at"]
    readings = iter([escalates_at - 1.0])  # the sweep starts just before the escalation...
    monkeypatch.setattr(time, "time", lambda: next(readings, escalates_at + 1.0))  # ...then passes
    await store.sweep()
    await store.sweep()
    monkeypatch.undo()
    wait = await store.pyworkflow.get_wait(approval["id"])
    assert wait is not None and wait.status == WaitStatus.PENDING
    assignment = store.db.read(lambda c: read_assignment(c, approval["id"]))
    assert assignment is not None
    assert (assignment["principals"], assignment["escalations"]) == (["boss"], 1)


async def test_a_sweep_with_nothing_due_writes_nothing_and_a_dead_escalation_is_dropped_once(
    service: Service, monkeypatch: pytest.MonkeyPatch
) -> None:
    """A sweep is first one read of what is due: with nothing due it commits nothing and asks the
    engine to expire nothing (it was two or three transactions every tick). An approval decided
    before its escalation shows none from then on, and the first sweep after the escalation's
    time drops it from the table (no escalation, nothing audited); kept, every later sweep read
    it again, so each tick grew with the approvals ever decided before their escalation."""
    store = service.store
    expiries = 0
    expire = store.pyworkflow.expire_due_waits

    async def counted(**kwargs: Any) -> int:
        nonlocal expiries
        expiries += 1
        return int(await expire(**kwargs))

    monkeypatch.setattr(store.pyworkflow, "expire_due_waits", counted)
    approval = await escalating(service)
    commits = store.db.commits
    await store.sweep()
    assert (store.db.commits, expiries) == (commits, 0)  # nothing due yet

    rita = Principal("t-rita", "rita", Role.REVIEWER)
    await service.decide(rita, approval["id"], "approved", b"{}")
    assignment = store.db.read(lambda c: read_assignment(c, approval["id"]))
    assert assignment is not None and (assignment["escalate"], assignment["escalates_at"]) == (None, None)
    assert assignment["principals"] == ["rita"] and assignment["escalations"] == 0

    def stored(c: Any) -> tuple[Any, ...]:
        sql = "SELECT escalate IS NULL, escalate_at FROM atfg_assignments WHERE wait_id = ?"
        return tuple(c.execute(sql, (approval["id"],)).fetchone())

    escalates_at = store.db.read(stored)[1]
    assert escalates_at is not None  # still in the table, until it falls due
    monkeypatch.setattr(time, "time", lambda: escalates_at + 1)
    await store.sweep()
    assert store.db.read(stored) in ((True, None), (1, None))  # dropped
    assert [r[1] for r in audit_rows(service) if r[2] == approval["id"]] == [
        "approval.request", "approval.decide",
    ]  # fmt: skip
    commits, expiries = store.db.commits, 0
    await store.sweep()
    assert (store.db.commits, expiries) == (commits, 0)  # nothing due any more


async def test_a_decision_reads_its_terms_first_only_when_it_has_some(
    service: Service, monkeypatch: pytest.MonkeyPatch
) -> None:
    """On PostgreSQL an approval with no response schema and no assignment is decided by one
    statement (``atfg_decide_plain`` checks both, migration postgres 0018): its terms are not
    read first, as they were (one statement of a cycle's nine). One with a schema or an
    assignment is decided as before: its response validated, its assignees checked, nothing
    written by a refusal. SQLite reads the terms every time (no round trip)."""
    store = service.store
    reads = counted_calls(monkeypatch, store, "decision_terms")
    trav, _ = await service.submit(OWNER, "desk.refund", dumps({}), 3)

    plain, _, _ = await service.request_approval(
        OWNER, trav["id"], None, "plain", b'"ok?"', None, None, False
    )
    decided = await service.decide(ALICE, plain["id"], "approved", b'{"note": "fine"}')
    assert (decided["status"], decided["decided_by"]) == ("approved", "alice")
    assert "response_schema" not in decided or decided["response_schema"] is None
    assert reads == ([] if ON_POSTGRES else [plain["id"]])
    again = await service.decide(ALICE, plain["id"], "approved", b'{"note": "fine"}')  # idempotent
    assert again["status"] == "approved"
    with pytest.raises(Conflict):  # the other decision is refused, as before
        await service.decide(ALICE, plain["id"], "rejected", None)
    with pytest.raises(NotFound):
        await service.decide(ALICE, "no-such-approval", "approved", None)

    reads.clear()
    schema = dumps({"type": "object", "required": ["amount"]})
    typed, _, _ = await service.request_approval(
        OWNER, trav["id"], None, "typed", b'"ok?"', None, None, False, response_schema=schema
    )
    with pytest.raises(Invalid) as refused:
        await service.decide(ALICE, typed["id"], "approved", b'{"note": "no amount"}')
    assert refused.value.code == "response_invalid"
    assert store.get_approval(typed["id"])["status"] == "pending"  # nothing written
    decided = await service.decide(ALICE, typed["id"], "approved", b'{"amount": 5}')
    assert decided["status"] == "approved" and decided["response_schema"] is not None
    assert reads == [typed["id"], typed["id"]]

    reads.clear()
    assigned, _, _ = await service.request_approval(
        OWNER, trav["id"], None, "assigned", b'"ok?"', None, None, False, assign_to=Assignees((), ("rita",))
    )
    with pytest.raises(Forbidden) as forbidden:
        await service.decide(ALICE, assigned["id"], "approved", None)
    assert forbidden.value.code == "not_assigned"
    assert store.get_approval(assigned["id"])["status"] == "pending"
    rita = Principal("t-rita", "rita", Role.REVIEWER)
    assert (await service.decide(rita, assigned["id"], "rejected", None))["status"] == "rejected"
    assert reads == [assigned["id"], assigned["id"]]
