"""GET /api/v2/runs, /runs/{id} and /inbox against a real server: pyworkflow runs (its local
runtime in this test's loop, on the server's database) beside a traverser; wrong, missing,
oversize and hostile query values; unknown ids; who may read them."""

from __future__ import annotations

from collections.abc import AsyncIterator, Iterator
from typing import Any
from urllib.parse import quote

import httpx
import pytest
from atfg_harness import ServerProcess

import pyworkflow
from pyworkflow import hook, workflow


@workflow
async def api_signed_off(doc: str) -> dict[str, Any]:
    answer = await hook("sign_off", payload_schema={"type": "object"})
    return {"doc": doc, "answer": answer}


@pytest.fixture(scope="module")
def server(tmp_path_factory: pytest.TempPathFactory) -> Iterator[ServerProcess]:
    proc = ServerProcess(tmp_path_factory.mktemp("runs-api"))
    proc.start()
    yield proc
    proc.close()


@pytest.fixture
async def http(server: ServerProcess) -> AsyncIterator[httpx.AsyncClient]:
    async with httpx.AsyncClient(base_url=server.url, headers=server.headers(), timeout=30) as c:
        yield c


@pytest.fixture
async def runs(server: ServerProcess, http: httpx.AsyncClient) -> AsyncIterator[dict[str, str]]:
    """A traverser with a pending approval (not paused), then a pyworkflow run on a hook."""
    trav = (await http.post("/api/v2/traversers", json={"target": "nobody.skill"})).json()["id"]
    body = {"traverser_id": trav, "operation_key": "k", "prompt": {"q": "<b>ok?</b>"}, "pause": False}
    approval = (await http.post("/api/v2/approvals", json=body)).json()["approval"]["id"]
    pyworkflow.configure(storage=server.storage_url, poll_interval=0.05)
    try:
        run_id = await pyworkflow.start(api_signed_off, "notes")
        await pyworkflow.wait_for_run(run_id, timeout=15, until=("suspended",))
        yield {"traverser": trav, "approval": approval, "workflow": run_id}
    finally:
        await pyworkflow.shutdown()
        pyworkflow.configure()


def assert_error(response: httpx.Response, status: int, code: str) -> None:
    assert response.status_code == status, (response.status_code, response.text[:300])
    body = response.json()
    assert set(body) == {"error"} and body["error"]["code"] == code and body["error"]["message"], body


async def test_runs_of_both_kinds_one_run_and_the_inbox(
    http: httpx.AsyncClient, runs: dict[str, str]
) -> None:
    r = await http.get("/api/v2/runs")
    assert r.status_code == 200, r.text
    items = r.json()["items"]
    mine = [i for i in items if i["id"] in runs.values()]
    assert [i["id"] for i in mine] == [runs["workflow"], runs["traverser"]]  # newest first
    wf, tv = mine
    assert (wf["kind"], wf["status"]) == ("workflow", "suspended") and wf["workflow"].endswith(
        "api_signed_off"
    )
    assert (tv["kind"], tv["status"], tv["traverser_status"]) == ("traverser", "pending", "queued")
    assert (tv["target"], tv["node_id"], tv["attempt"]) == ("nobody.skill", "nobody", 0)

    kinds = {
        k: [i["id"] for i in (await http.get("/api/v2/runs", params={"kind": k})).json()["items"]]
        for k in ("workflow", "traverser")
    }
    assert runs["workflow"] in kinds["workflow"] and runs["traverser"] not in kinds["workflow"]
    assert runs["traverser"] in kinds["traverser"] and runs["workflow"] not in kinds["traverser"]
    for status, expected in (("suspended", "workflow"), ("pending", "traverser"), ("queued", "traverser")):
        ids = [i["id"] for i in (await http.get("/api/v2/runs", params={"status": status})).json()["items"]]
        assert runs[expected] in ids, (status, ids)
    assert (await http.get("/api/v2/runs", params={"limit": 1})).json()["items"][0]["id"] == runs["workflow"]

    record = (await http.get(f"/api/v2/runs/{runs['workflow']}")).json()
    assert set(record) == {"run", "steps", "waits", "checkpoints", "events", "truncated"}
    assert record["run"]["input"] is not None
    (wait,) = record["waits"]
    assert (wait["kind"], wait["name"], wait["status"]) == ("hook", "sign_off", "pending")
    assert record["events"][0]["type"] == "run_created"
    trav = (await http.get(f"/api/v2/runs/{runs['traverser']}")).json()
    assert [(w["id"], w["kind"]) for w in trav["waits"]] == [(runs["approval"], "approval")]
    assert trav["waits"][0]["prompt"] == {"q": "<b>ok?</b>"}

    inbox = (await http.get("/api/v2/inbox")).json()["items"]
    mine = [i for i in inbox if i["run"]["id"] in runs.values()]
    assert [(i["kind"], i["run"]["id"]) for i in mine] == [
        ("approval", runs["traverser"]),
        ("hook", runs["workflow"]),
    ]
    assert mine[1]["payload_schema"] == {"type": "object"}
    assert [i["created_at"] for i in inbox] == sorted(i["created_at"] for i in inbox)


BAD_QUERIES = [
    ("/api/v2/runs", {"kind": "bogus"}),
    ("/api/v2/runs", {"kind": ""}),
    ("/api/v2/runs", {"kind": "WORKFLOW"}),
    ("/api/v2/runs", {"status": "bogus"}),
    ("/api/v2/runs", {"status": "x" * 10_000}),
    ("/api/v2/runs", {"status": "'; DROP TABLE runs; --"}),
    ("/api/v2/runs", {"status": "terminal"}),
    ("/api/v2/runs", {"limit": "many"}),
    ("/api/v2/runs", {"limit": 0}),
    ("/api/v2/runs", {"limit": -1}),
    ("/api/v2/runs", {"limit": 1001}),
    ("/api/v2/runs", {"limit": 10**30}),
    ("/api/v2/runs", {"limit": "1.5"}),
    ("/api/v2/inbox", {"limit": "many"}),
    ("/api/v2/inbox", {"limit": 0}),
    ("/api/v2/inbox", {"limit": 10**6}),
]


@pytest.mark.parametrize(("path", "params"), BAD_QUERIES, ids=[f"{p} {q}"[:60] for p, q in BAD_QUERIES])
async def test_bad_query_values_are_422(http: httpx.AsyncClient, path: str, params: dict[str, Any]) -> None:
    assert_error(await http.get(path, params=params), 422, "validation_error")


async def test_nul_in_a_query_is_400_and_hostile_ids_are_404(http: httpx.AsyncClient) -> None:
    assert_error(await http.get("/api/v2/runs", params={"status": "pending\u0000"}), 400, "invalid_request")
    assert_error(await http.get("/api/v2/inbox", params={"limit": "1\u0000"}), 400, "invalid_request")
    for ident in ("nope", "x" * 8000, "é🙂", "%2F..%2F..", "'; DROP TABLE runs; --", "\u0000", " "):
        r = await http.get(f"/api/v2/runs/{quote(ident, safe='')}")
        assert_error(r, 404, "not_found")
    assert (await http.get("/api/v2/runs")).status_code == 200
    assert_error(await http.put("/api/v2/runs", json={}), 405, "method_not_allowed")
    assert_error(await http.post("/api/v2/runs", json={}), 422, "validation_error")  # starts a run
    assert_error(await http.delete("/api/v2/inbox"), 405, "method_not_allowed")


async def test_a_worker_token_may_not_read_runs_or_the_inbox(
    server: ServerProcess, runs: dict[str, str]
) -> None:
    worker = {"Authorization": f"Bearer {server.token('worker')}"}
    async with httpx.AsyncClient(base_url=server.url, timeout=30) as anon:
        for path in ("/api/v2/runs", f"/api/v2/runs/{runs['workflow']}", "/api/v2/inbox"):
            assert_error(await anon.get(path, headers=worker), 403, "forbidden")
            assert_error(await anon.get(path), 401, "unauthenticated")
            assert_error(
                await anon.get(path, headers={"Authorization": "Bearer nope"}), 401, "unauthenticated"
            )
        # An unknown id is no different for a worker: refused before anything is read.
        assert_error(await anon.get("/api/v2/runs/nope", headers=worker), 403, "forbidden")


async def test_the_routes_are_in_the_openapi_document(http: httpx.AsyncClient) -> None:
    doc = (await http.get("/api/v2/openapi.json")).json()
    runs = doc["paths"]["/api/v2/runs"]["get"]
    params = {p["name"]: p for p in runs["parameters"]}
    assert set(params) == {
        "kind",
        "status",
        "target",
        "id_prefix",
        "created_after",
        "created_before",
        "limit",
        "after",
    }
    assert "422" in runs["responses"]
    one = doc["paths"]["/api/v2/runs/{run_id}"]["get"]
    assert {"404", "422"} <= set(one["responses"]) and "events" in one["description"]
    assert "/api/v2/inbox" in doc["paths"]
