"""Upgrading a database written by atfgraph v1 loses nothing: the fixture (built by
``fixtures/build_atfgraph_v1.py`` with the code of its manifest's ``built.git_commit``) is opened
by today's graph server, which applies whatever migrations are newer than the fixture's, and
everything the manifest records is then read back through the HTTP API v2 and pyworkflow's API,
with the same statuses, revisions and values. A review that was waiting for a decision is then
approved, a worker runs the fixture's agent again, and the traverser finishes with a result
derived from the checkpoint, the child step and the decision it had before the upgrade.

SQLite: a copy of the committed file. PostgreSQL: a new database with the schema of the fixture's
recorded migrations and its rows (``fixtures/load_v1_postgres.py``)."""

from __future__ import annotations

import asyncio
import json
import shutil
import sys
from collections.abc import Iterator
from pathlib import Path
from typing import Any

import httpx
import pytest

import pyworkflow

ROOT = Path(__file__).resolve().parents[2]
if str(ROOT) not in sys.path:
    sys.path.insert(0, str(ROOT))

from tests.migration.fixtures import load_v1_postgres  # noqa: E402 - needs ROOT on sys.path
from tests.migration.fixtures.build_atfgraph_v1 import dump_postgres, schema_versions  # noqa: E402
from tests.migration.fixtures.processes import GraphServer, GraphWorker  # noqa: E402

FIXTURES = ROOT / "tests" / "migration" / "fixtures"
MANIFEST: dict[str, Any] = json.loads((FIXTURES / "atfgraph_v1.json").read_text())
AGENT = "tests.migration.fixtures.agent_v1:app"
STATUSES = ("queued", "running", "waiting", "succeeded", "failed", "cancelled")
#: what the test's reviewer answers
RESPONSE = {"note": "approved after the upgrade"}


class Api:
    """The HTTP API v2 with one bearer token."""

    def __init__(self, url: str, token: str) -> None:
        self.http = httpx.Client(
            base_url=url + "/api/v2", headers={"Authorization": f"Bearer {token}"}, timeout=70
        )

    def get(self, path: str, **params: Any) -> Any:
        response = self.http.get(path, params=params)
        assert response.status_code == 200, f"GET {path}: {response.status_code} {response.text}"
        return response.json()

    def post(self, path: str, body: Any) -> httpx.Response:
        return self.http.post(path, json=body)

    def close(self) -> None:
        self.http.close()


@pytest.fixture(params=["sqlite", pytest.param("postgres", marks=pytest.mark.postgres)])
def upgraded(request: pytest.FixtureRequest, tmp_path: Path) -> Iterator[tuple[GraphServer, dict[str, Any]]]:
    """A graph server started on the v1 fixture of one dialect, and that dialect's manifest."""
    dialect: str = request.param
    manifest = MANIFEST[dialect]
    if dialect == "sqlite":
        db = str(tmp_path / "atfgraph.db")
        shutil.copyfile(FIXTURES / "atfgraph_v1.db", db)
    else:
        db = request.getfixturevalue("pg_database")  # fails with one line when PostgreSQL is down
        load_v1_postgres.load(db)
    # The database is the fixture as built, at its recorded schema, before the server upgrades it.
    assert schema_versions(db) == manifest["schema_migrations"]
    server = GraphServer(tmp_path / "home", db)
    try:
        server.start()
        yield server, manifest
    finally:
        server.stop()
    assert "Traceback" not in server.output(), server.output()


@pytest.mark.postgres
def test_the_postgres_loader_restores_the_dump_exactly(pg_database: str) -> None:
    load_v1_postgres.load(pg_database)
    assert dump_postgres(pg_database) == (FIXTURES / "atfgraph_v1_postgres.sql").read_text()


def storage_url(db: str) -> str:
    return db if db.startswith("postgresql://") else f"sqlite:///{db}"


def test_v1_fixture_survives_the_upgrade_and_its_pending_review_finishes(
    upgraded: tuple[GraphServer, dict[str, Any]],
) -> None:
    server, m = upgraded
    api = Api(server.url, m["credentials"]["owner"])
    try:
        check_traversers(api, m)
        check_approvals(api, m)
        check_checkpoints(api, m)
        check_steps(api, m)
        check_memory(api, m)
        check_identity(api, m)
        check_workers(api, m)
        check_pyworkflow(api, m, storage_url(server.db))
        check_idempotency_keys(api, m)
        finish_the_pending_review(server, api, m)
    finally:
        api.close()


# -- what the manifest records is there, unchanged ---------------------------------------------


def named(m: dict[str, Any], name: str) -> str:
    traverser_id: str = m["names"][name]
    return traverser_id


def check_traversers(api: Api, m: dict[str, Any], moved: dict[str, str] | None = None) -> None:
    """Each status lists exactly the manifest's traversers in it, each as recorded; ``moved``:
    the ids the test has since run, with their status now (their other fields are checked
    where they were run)."""
    moved = moved or {}
    now = {tid: moved.get(tid, t["status"]) for tid, t in m["traversers"].items()}
    assert {t["status"] for t in m["traversers"].values()} == set(STATUSES)  # the fixture covers all
    for status in STATUSES:
        listed = {t["id"] for t in api.get("/traversers", status=status, limit=1000)["items"]}
        assert listed == {tid for tid, s in now.items() if s == status}, status
    fields = ("target", "node_id", "version", "status", "attempt", "max_attempts", "input")
    for tid, recorded in m["traversers"].items():
        if tid in moved:
            continue
        view = api.get(f"/traversers/{tid}")
        for field in (*fields, "result", "error", "waiting_on"):
            assert view[field] == recorded[field], (recorded["name"], field, view[field], recorded[field])


def check_approvals(api: Api, m: dict[str, Any]) -> None:
    listed = {a["id"]: a for a in api.get("/approvals", status="all", limit=1000)["items"]}
    assert set(listed) == set(m["approvals"])
    assert {a["status"] for a in listed.values()} == {"pending", "approved", "rejected", "expired"}
    for approval_id, recorded in m["approvals"].items():
        view = api.get(f"/approvals/{approval_id}")
        assert view == listed[approval_id]
        for field in ("traverser_id", "operation_key", "status", "decided_by", "prompt", "checkpoint"):
            assert view[field] == recorded[field], (approval_id, field, view[field], recorded[field])
        assert view["response"] == recorded["response"], approval_id
        if recorded["expires_at"] is None:
            assert view["expires_at"] is None, approval_id
        else:
            assert view["expires_at"] == pytest.approx(recorded["expires_at"], abs=1e-3), approval_id
    pending = [a["id"] for a in api.get("/approvals", status="pending", limit=1000)["items"]]
    assert sorted(pending) == sorted(a for a, r in m["approvals"].items() if r["status"] == "pending")


def check_checkpoints(api: Api, m: dict[str, Any]) -> None:
    assert max(c["revision"] for c in m["checkpoints"]) >= 3
    for recorded in m["checkpoints"]:
        view = api.get(f"/traversers/{recorded['traverser_id']}/checkpoints/{recorded['name']}")
        assert (view["revision"], view["value"]) == (recorded["revision"], recorded["value"]), recorded


def check_steps(api: Api, m: dict[str, Any]) -> None:
    fields = ("key", "seq", "target", "status", "attempt", "result", "error")
    for tid, recorded in m["steps"].items():
        path = api.get(f"/traversers/{tid}/path")
        assert path["traverser"]["id"] == tid
        assert [{k: s[k] for k in fields} for s in path["steps"]] == recorded, tid
    statuses = {s["status"] for steps in m["steps"].values() for s in steps}
    assert statuses == {"succeeded", "failed"}


def check_memory(api: Api, m: dict[str, Any]) -> None:
    for recorded in m["memory"]:
        view = api.get(f"/memory/{recorded['scope']}/{recorded['key']}")
        assert (view["revision"], view["value"]) == (recorded["revision"], recorded["value"]), recorded


def check_identity(api: Api, m: dict[str, Any]) -> None:
    tokens = [
        {
            "id": t["id"],
            "name": t["name"],
            "role": t["role"],
            "created_by": t["created_by"],
            "revoked": t["revoked_at"] is not None,
        }
        for t in api.get("/tokens")["items"]
    ]
    assert sorted(tokens, key=lambda t: t["id"]) == sorted(m["tokens"], key=lambda t: t["id"])
    audit = api.get("/audit", limit=1000)["items"]
    assert len(audit) == m["audit"]["count"]
    fields = ("principal", "role", "action", "target", "outcome", "detail")
    assert [{k: row[k] for k in fields} for row in reversed(audit)] == m["audit"]["rows"]


def check_workers(api: Api, m: dict[str, Any]) -> None:
    listed = {w["id"]: w for w in api.get("/workers", limit=1000)["items"]}
    for worker_id, recorded in m["workers"].items():
        assert worker_id in listed, f"worker {worker_id} is gone"
        assert {k: listed[worker_id][k] for k in recorded} == recorded


def check_pyworkflow(api: Api, m: dict[str, Any], storage: str) -> None:
    """The runs through pyworkflow's API, and their pending hooks as the graph server lists them."""

    async def read() -> tuple[dict[str, Any], list[Any]]:
        pyworkflow.configure(storage=storage)
        try:
            runs = {run_id: await pyworkflow.get_workflow_run(run_id) for run_id in m["pyworkflow"]}
            return runs, await pyworkflow.list_pending_hooks()
        finally:
            await pyworkflow.shutdown()

    runs, pending = asyncio.run(read())
    assert {r["status"] for r in m["pyworkflow"].values()} == {"completed", "suspended"}
    for run_id, recorded in m["pyworkflow"].items():
        run = runs[run_id]
        assert (run.workflow_name, run.status.value, run.input, run.result) == (
            recorded["workflow"],
            recorded["status"],
            recorded["input"],
            recorded["result"],
        ), run_id
        waits = [
            {"id": h.hook_id, "kind": h.kind, "name": h.name, "step_key": h.step_key}
            for h in pending
            if h.run_id == run_id
        ]
        assert waits == recorded["pending_waits"], run_id
    hooks = sorted((h["id"], h["run_id"], h["kind"], h["name"]) for h in api.get("/hooks")["items"])
    assert hooks == sorted(
        (w["id"], run_id, w["kind"], w["name"])
        for run_id, run in m["pyworkflow"].items()
        for w in run["pending_waits"]
    )
    assert len(hooks) == 2


def check_idempotency_keys(api: Api, m: dict[str, Any]) -> None:
    """Submitting a fixture traverser again with its key answers the original (200, same id)."""
    for tid, recorded in m["traversers"].items():
        body = {
            "target": recorded["target"],
            "input": recorded["input"],
            "idempotency_key": recorded["idempotency_key"],
        }
        response = api.post("/traversers", body)
        assert response.status_code == 200, (recorded["name"], response.status_code, response.text)
        assert response.json()["id"] == tid, recorded["name"]


# -- the pending review continues --------------------------------------------------------------


def finish_the_pending_review(server: GraphServer, api: Api, m: dict[str, Any]) -> None:
    review = named(m, "review_pending")
    before = m["traversers"][review]
    assert before["status"] == "waiting"
    approval_id = before["waiting_on"]
    case = next(c for c in m["checkpoints"] if c["traverser_id"] == review and c["name"] == "case")
    assert case["revision"] == 2 and m["approvals"][approval_id]["checkpoint"] == case["value"]
    (quote,) = m["steps"][review]
    owner = next(t["name"] for t in m["tokens"] if t["role"] == "owner")

    decided = api.post(f"/approvals/{approval_id}/decide", {"decision": "approved", "response": RESPONSE})
    assert decided.status_code == 200, decided.text
    assert (decided.json()["status"], decided.json()["decided_by"]) == ("approved", owner)
    newest = api.get("/audit", limit=1)["items"][0]
    assert (newest["action"], newest["target"], newest["outcome"]) == (
        "approval.decide",
        approval_id,
        "allowed",
    )

    worker = GraphWorker(server, AGENT, m["credentials"]["worker"]).start()
    try:
        finished = api.get(f"/traversers/{review}", wait_for="terminal", timeout=60)
        queued = api.get(f"/traversers/{named(m, 'echo_queued')}", wait_for="terminal", timeout=60)
    finally:
        worker.stop()
    assert finished["status"] == "succeeded", (finished, worker.output())
    value = case["value"]
    assert finished["result"] == {
        "order": value["order"],
        "nonce": value["nonce"],
        "total": value["total"],
        "quote_id": value["quote_id"],
        "step_quote_id": quote["result"]["quote_id"],
        "decision": "approved",
        "decided_by": owner,
        "response": RESPONSE,
        "case_revision": 3,
    }
    # One more attempt for the continuation; the pause cost none of the retry budget.
    assert finished["attempt"] == before["attempt"] + 1
    assert finished["max_attempts"] - finished["attempt"] == before["max_attempts"] - before["attempt"]
    final = api.get(f"/traversers/{review}/checkpoints/case")
    assert (final["revision"], final["value"]) == (3, {**value, "decision": "approved"})
    # The child step was replayed from the path, not run again (its quote id is random).
    steps = api.get(f"/traversers/{review}/path")["steps"]
    assert [{k: s[k] for k in quote} for s in steps] == [quote]
    # The traverser queued before the upgrade ran, on its first attempt.
    assert queued["status"] == "succeeded", (queued, worker.output())
    assert queued["result"] == {
        "echo": m["traversers"][named(m, "echo_queued")]["input"]["text"],
        "attempt": 1,
    }
    # Nothing else moved: the running one keeps its lease, the other pending approvals wait on.
    check_traversers(api, m, moved={review: "succeeded", named(m, "echo_queued"): "succeeded"})
    for approval_id_, recorded in m["approvals"].items():
        if approval_id_ != approval_id:
            assert api.get(f"/approvals/{approval_id_}")["status"] == recorded["status"]
