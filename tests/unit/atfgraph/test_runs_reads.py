"""Every run of either kind and the one inbox, read from the graph store: pyworkflow runs (from
its local runtime on the same database) beside traversers, their records, and the inbox's single
indexed query. On a temporary SQLite file, or with ``PYWORKFLOW_TEST_STORE=postgresql`` a new
PostgreSQL database."""

from __future__ import annotations

import os
from collections.abc import AsyncIterator
from typing import Any

import orjson
import pytest

import pyworkflow
from atfgraph.server import _runs_reads as rr
from atfgraph.server._refusals import NotFound
from atfgraph.server._store import GraphStore
from pyworkflow import WaitStatus, save_step_checkpoint, sleep, step, step_hook, workflow
from pyworkflow.store import WaitKind

ON_POSTGRES = os.environ.get("PYWORKFLOW_TEST_STORE", "sqlite") in ("postgresql", "postgres")


@pytest.fixture
async def store(location: str) -> AsyncIterator[GraphStore]:
    s = GraphStore(location, lease_seconds=5)
    yield s
    s.close()


@step
async def draft(doc: str) -> str:
    await save_step_checkpoint({"drafted": doc})
    return doc.upper()


@step
async def review(text: str) -> dict[str, Any]:
    await save_step_checkpoint({"reviewing": text})
    answer = await step_hook("runs_review", payload_schema={"type": "object"})
    return {"text": text, "answer": answer}


@workflow
async def runs_reviewed(doc: str) -> dict[str, Any]:
    return await review(await draft(doc))


@workflow
async def runs_sleeper() -> str:
    await sleep(3600)
    return "woke"


@pytest.fixture
async def runs(store: GraphStore, location: str) -> AsyncIterator[dict[str, str]]:
    """A sleeping pyworkflow run (a timer), a traverser with a pending approval, and a pyworkflow
    run suspended on a step hook, created in that order."""
    url = location if ON_POSTGRES else f"sqlite:///{location}"
    pyworkflow.configure(storage=url, poll_interval=0.02)
    try:
        sleeper = await pyworkflow.start(runs_sleeper)
        await pyworkflow.wait_for_run(sleeper, timeout=15, until=("suspended",))
        worker = (await store.register_worker("n", "1.0", 1))["id"]
        trav, _ = await store.submit("n.skill", b'{"x": 1}', max_attempts=2)
        task = (await store.claim(worker, 1))[0]
        approval, _ = await store.request_approval(
            trav["id"], task["epoch"], "ok-to-ship", b'"ship it?"', None, None, True, []
        )
        reviewed = await pyworkflow.start(runs_reviewed, "notes")
        await pyworkflow.wait_for_run(reviewed, timeout=15, until=("suspended",))
        yield {"sleeper": sleeper, "traverser": trav["id"], "approval": approval["id"], "reviewed": reviewed}
    finally:
        await pyworkflow.shutdown()
        pyworkflow.configure()


async def test_every_run_newest_first_by_kind_and_status(store: GraphStore, runs: dict[str, str]) -> None:
    every = store.list_runs("all", None, 100)
    assert [r["id"] for r in every] == [runs["reviewed"], runs["traverser"], runs["sleeper"]]
    wf = next(r for r in every if r["id"] == runs["reviewed"])
    assert wf["kind"] == "workflow" and wf["status"] == "suspended"
    assert wf["workflow"].endswith("runs_reviewed") and "traverser_status" not in wf
    stamps = {"created_at", "updated_at", "finished_at"}
    assert set(wf) == {"id", "kind", "workflow", "status", "error"} | stamps | {f"{s}_iso" for s in stamps}
    tv = next(r for r in every if r["id"] == runs["traverser"])
    assert (tv["kind"], tv["status"], tv["traverser_status"]) == ("traverser", "suspended", "waiting")
    assert (tv["target"], tv["node_id"], tv["attempt"], tv["max_attempts"]) == ("n.skill", "n", 1, 2)
    assert tv["waiting_on"] == runs["approval"]

    assert [r["id"] for r in store.list_runs("workflow", None, 100)] == [runs["reviewed"], runs["sleeper"]]
    assert [r["id"] for r in store.list_runs("traverser", None, 100)] == [runs["traverser"]]
    # A status by the engine's name or the API's matches both kinds alike.
    for status in ("suspended", "waiting"):
        assert len(store.list_runs("all", status, 100)) == 3
        assert [r["id"] for r in store.list_runs("traverser", status, 100)] == [runs["traverser"]]
    assert store.list_runs("all", "completed", 100) == []
    # LIMIT counts matching runs only.
    assert [r["id"] for r in store.list_runs("workflow", "suspended", 1)] == [runs["reviewed"]]
    assert [r["id"] for r in store.list_runs("all", None, 1)] == [runs["reviewed"]]


def _json(value: Any) -> Any:
    return orjson.loads(orjson.dumps(value))


async def test_one_run_of_either_kind_with_its_record(store: GraphStore, runs: dict[str, str]) -> None:
    record = _json(await store.get_run(runs["reviewed"]))
    assert record["run"]["input"] is not None and record["run"]["result"] is None
    steps = {s["key"]: s for s in record["steps"]}
    assert any(s["status"] == "completed" and s["result"] == "NOTES" for s in steps.values()), steps
    (hook,) = record["waits"]
    assert (hook["kind"], hook["name"], hook["status"]) == ("step_hook", "runs_review", "pending")
    assert hook["payload_schema"] == {"type": "object"} and "prompt" not in hook
    assert hook["step_key"].startswith("review") and hook["step_key"] not in steps  # still inside it
    # The step waiting in its hook keeps its checkpoint; the completed one's went with its result.
    (checkpoint,) = record["checkpoints"]
    assert checkpoint["value"] == {"reviewing": "NOTES"} and checkpoint["revision"] == 1
    assert checkpoint["scope"] == hook["step_key"]
    types = [e["type"] for e in record["events"]]
    assert types[0] == "run_created" and "step_completed" in types and "wait_created" in types
    assert [e["seq"] for e in record["events"]] == sorted(e["seq"] for e in record["events"])
    assert record["truncated"] == []

    sleeping = _json(await store.get_run(runs["sleeper"]))
    assert [(w["kind"], w["status"]) for w in sleeping["waits"]] == [("timer", "pending")]

    trav = _json(await store.get_run(runs["traverser"]))
    assert trav["run"]["input"] == {"x": 1} and trav["run"]["traverser_status"] == "waiting"
    (approval,) = trav["waits"]
    assert (approval["id"], approval["kind"], approval["key"]) == (runs["approval"], "approval", "ok-to-ship")
    assert approval["prompt"] == "ship it?" and approval["decision"] is None

    with pytest.raises(NotFound):
        await store.get_run("no-such-run")


async def test_the_inbox_is_approvals_and_hooks_oldest_first_never_timers(
    store: GraphStore, runs: dict[str, str]
) -> None:
    items = _json(store.inbox(100))
    assert [(i["kind"], i["run"]["id"]) for i in items] == [
        ("approval", runs["traverser"]),
        ("step_hook", runs["reviewed"]),
    ]
    approval, hook = items
    assert approval["id"] == runs["approval"] and approval["key"] == "ok-to-ship"
    assert approval["prompt"] == "ship it?" and approval["checkpoint"] is None
    assert approval["run"] == {
        "id": runs["traverser"],
        "kind": "traverser",
        "workflow": "n.skill",
        "status": "suspended",
        "target": "n.skill",
        "node_id": "n",
        "attempt": 1,
        "max_attempts": 2,
        "traverser_status": "waiting",
    }
    assert hook["name"] == "runs_review" and hook["payload_schema"] == {"type": "object"}
    assert hook["run"]["kind"] == "workflow" and hook["run"]["status"] == "suspended"
    assert [i["kind"] for i in _json(store.inbox(1))] == ["approval"]
    # The same waits the two reads it replaces found.
    hooks = await store.pyworkflow.list_waits(
        status=WaitStatus.PENDING, kinds=(WaitKind.HOOK, WaitKind.STEP_HOOK), limit=100
    )
    assert [w.id for w in hooks] == [hook["id"]]
    assert [a["id"] for a in store.console_approvals(True, 100)] == [approval["id"]]
    # Decided, it leaves the inbox.
    await store.decide(runs["approval"], "approved", None, "owner")
    assert [i["kind"] for i in _json(store.inbox(100))] == ["step_hook"]


def test_the_inbox_kinds_are_every_kind_a_deadline_does_not_end() -> None:
    # SQL_INBOX and waits_inbox name the kinds by exclusion (timer, retry): a new kind of wait
    # must be placed on one side or the other here.
    assert set(rr.INBOX_KINDS) == {k.value for k in WaitKind} - {WaitKind.TIMER.value, WaitKind.RETRY.value}
    assert "NOT IN ('timer', 'retry')" in rr.SQL_INBOX


READS = [
    ("SQL_INBOX", (10,), ("waits_inbox",)),
    ("SQL_RUNS", (10,), ("runs_by_created",)),
    ("SQL_RUNS:workflow", (10,), ("runs_by_created",)),
    ("SQL_RUNS:status", ("suspended", 10), ("runs_by_status",)),
    ("SQL_RUN", ("r",), ()),
    ("SQL_RUN_STEPS", ("r", 10), ()),
    ("SQL_RUN_WAITS", ("r", 10), ()),
    ("SQL_RUN_CHECKPOINTS", ("r", 10), ()),
]


def _query(name: str) -> str:
    base, _, variant = name.partition(":")
    where = {"": "", "workflow": rr.KIND_WHERE["workflow"], "status": " AND r.status = ?"}[variant]
    sql: str = getattr(rr, base)
    # The listings' order (_paging.keyset): time, then id as the cursor's tie-break.
    order = (
        " ORDER BY w.created_at ASC, w.id ASC"
        if base == "SQL_INBOX"
        else " ORDER BY r.created_at DESC, r.id DESC"
    )
    return sql.format(where=where, order=order, kinds="") if "{where}" in sql else sql


@pytest.mark.parametrize(("name", "params", "indexes"), READS, ids=[r[0] for r in READS])
async def test_the_reads_walk_indexes(
    store: GraphStore, name: str, params: tuple[Any, ...], indexes: tuple[str, ...]
) -> None:
    query = _query(name)
    if ON_POSTGRES:

        def explain(c: Any) -> list[str]:
            c.execute("SET LOCAL enable_seqscan = off")
            return [str(r[0]) for r in c.execute("EXPLAIN " + query, params).fetchall()]

        plan = store.db.read(explain)
        assert not [line for line in plan if "Seq Scan" in line], plan
    else:
        rows = store.db.read(lambda c: c.execute("EXPLAIN QUERY PLAN " + query, params).fetchall())
        plan = [str(row[-1]) for row in rows]
        assert not [d for d in plan if d.startswith("SCAN") and "USING" not in d], plan
        if indexes:  # ordered walks: no sort of the matching rows (ties of time sort by id)
            assert not [d for d in plan if "TEMP B-TREE" in d and "RIGHT PART" not in d], plan
    text = "\n".join(plan)
    assert "Index" in text or "INDEX" in text or "PRIMARY KEY" in text, plan
    for index in indexes:
        assert index in text, plan
