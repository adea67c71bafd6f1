"""Starting a pyworkflow run by workflow name through the graph server (``POST /api/v2/runs``,
``atfg runs start --workflow``), as Temporal starts a workflow by type: a real server and, in
another process, pyworkflow's local runtime serving the same database with the workflow
registered (``atfg_flows``), which runs it to completion; the result is read back through
``GET /runs/{id}``. An unknown name fails the run with the runtime's message, which says what to
do; bad bodies are refused in the API's one error shape with nothing written; reviewers and
workers may not start runs (as they may not submit traversers); every start is audited."""

from __future__ import annotations

import json
import subprocess
import sys
from collections.abc import Iterator
from pathlib import Path
from typing import Any

import httpx
import pytest
from atfg_console import create_token
from atfg_flows import FlowsProcess
from atfg_harness import ServerProcess, wait_until

ATFG = str(Path(sys.executable).parent / "atfg")


@pytest.fixture(scope="module")
def server(tmp_path_factory: pytest.TempPathFactory) -> Iterator[ServerProcess]:
    proc = ServerProcess(tmp_path_factory.mktemp("atfg-start-wf"))
    for name in ("ATFGRAPH_TOKEN", "ATFGRAPH_CONFIG", "ATFGRAPH_OUTPUT"):
        proc.env.pop(name, None)
    proc.start()
    flows = FlowsProcess(proc).start()
    yield proc
    flows.kill()
    proc.close()


def api(server: ServerProcess, method: str, path: str, body: Any = None, **kw: Any) -> httpx.Response:
    headers = kw.pop("headers", None) or server.headers()
    return httpx.request(method, f"{server.url}/api/v2{path}", json=body, headers=headers, timeout=30, **kw)


def atfg(server: ServerProcess, *args: str) -> subprocess.CompletedProcess[str]:
    return subprocess.run(
        [ATFG, *args], env=server.env, cwd=server.home, capture_output=True, text=True, timeout=90
    )


def run_of(server: ServerProcess, run_id: str) -> dict[str, Any]:
    run: dict[str, Any] = api(server, "GET", f"/runs/{run_id}").json()["run"]
    return run


def ended(server: ServerProcess, run_id: str) -> dict[str, Any]:
    wait_until(
        lambda: run_of(server, run_id)["status"] in ("completed", "failed", "cancelled"),
        30,
        f"run {run_id} never ended",
    )
    return run_of(server, run_id)


def workflow_runs(server: ServerProcess) -> list[str]:
    return [r["id"] for r in api(server, "GET", "/runs?kind=workflow&limit=1000").json()["items"]]


def audit_count(server: ServerProcess) -> int:
    return len(api(server, "GET", "/audit?limit=1000").json()["items"])


def test_a_run_started_by_name_runs_on_the_pyworkflow_process_serving_the_database(
    server: ServerProcess,
) -> None:
    answer = api(server, "POST", "/runs", {"workflow": "flows:sum", "input": {"a": 2, "b": 40, "note": "é"}})
    assert answer.status_code == 201, answer.text
    started = answer.json()
    assert (started["kind"], started["workflow"]) == ("workflow", "flows:sum")
    assert started["status"] in ("pending", "running", "completed")
    assert started["input"] == {"args": [], "kwargs": {"a": 2, "b": 40, "note": "é"}}
    run = ended(server, started["id"])
    assert (run["status"], run["result"]) == ("completed", {"sum": 42, "note": "é"})
    assert set(started) == set(run)  # the run as GET /runs/{id} shows it
    record = api(server, "GET", f"/runs/{started['id']}").json()
    assert [s["status"] for s in record["steps"]] == ["completed"]
    entries = api(server, "GET", f"/audit?target={started['id']}").json()["items"]
    assert [(e["action"], e["outcome"], e["detail"]) for e in entries] == [
        ("run.start", "allowed", {"workflow": "flows:sum"})
    ]
    # No input at all is {}: the workflow's own defaults and a TypeError for missing arguments.
    bare = api(server, "POST", "/runs", {"workflow": "flows:sum"}).json()
    failed = ended(server, bare["id"])
    assert failed["status"] == "failed" and "TypeError" in failed["error"]["type"]


def test_an_unknown_workflow_fails_the_run_saying_what_to_do(server: ServerProcess) -> None:
    started = api(server, "POST", "/runs", {"workflow": "flows:no-such", "input": {}}).json()
    run = ended(server, started["id"])
    assert run["status"] == "failed" and run["error"]["type"].endswith("WorkflowNotFoundError")
    message = run["error"]["message"]
    assert "workflow 'flows:no-such' is not registered in this process" in message
    assert "started by name" in message and "retry the run" in message


BIG = "x" * (1024 * 1024)


@pytest.mark.parametrize(
    ("body", "status", "code"),
    [
        ({}, 422, "validation_error"),
        ({"workflow": None}, 422, "validation_error"),
        ({"workflow": ""}, 422, "validation_error"),
        ({"workflow": "   "}, 422, "validation_error"),
        ({"workflow": 7}, 422, "validation_error"),
        ({"workflow": "x" * 257}, 422, "validation_error"),
        ({"workflow": "flows:sum\n"}, 422, "validation_error"),
        ({"workflow": "flows\x00sum"}, 422, "validation_error"),
        ({"workflow": "flows:\u202esum"}, 422, "validation_error"),
        ({"workflow": "flows:sum", "input": [1, 2]}, 422, "validation_error"),
        ({"workflow": "flows:sum", "input": "a=1"}, 422, "validation_error"),
        (b'{"workflow": "flows:sum", "input": {"a": 18446744073709551616}}', 422, "validation_error"),
        (b'{"workflow": "flows:sum", "input": {"a": 1e400}}', 422, "validation_error"),
        (b'{"workflow": "flows:sum", "input": {"a": NaN}}', 400, "invalid_json"),
        (b'["flows:sum"]', 422, "validation_error"),
        (b"{", 400, "invalid_json"),
        ({"workflow": "flows:sum", "input": {"big": BIG}}, 413, "payload_too_large"),
    ],
)
def test_bad_bodies_are_refused_and_nothing_is_written(
    server: ServerProcess, body: Any, status: int, code: str
) -> None:
    runs, entries = workflow_runs(server), audit_count(server)
    raw = body if isinstance(body, bytes) else json.dumps(body).encode()
    headers = {**server.headers(), "Content-Type": "application/json"}
    answer = httpx.post(f"{server.url}/api/v2/runs", content=raw, headers=headers, timeout=30)
    assert (answer.status_code, answer.json()["error"]["code"]) == (status, code), answer.text
    assert set(answer.json()) == {"error"}
    assert workflow_runs(server) == runs and audit_count(server) == entries


def test_reviewers_and_workers_may_not_start_runs(server: ServerProcess) -> None:
    reviewer = create_token(server, "start-reviewer", "reviewer")
    administrator = create_token(server, "start-admin", "administrator")
    runs = workflow_runs(server)
    for token in (reviewer, server.token("worker")):
        for path, body in (("/runs", {"workflow": "flows:sum"}), ("/traversers", {"target": "a.b"})):
            answer = api(server, "POST", path, body, headers={"Authorization": f"Bearer {token}"})
            assert (answer.status_code, answer.json()["error"]["code"]) == (403, "forbidden"), answer.text
    answer = httpx.post(f"{server.url}/api/v2/runs", json={"workflow": "flows:sum"}, timeout=10)
    assert answer.status_code == 401
    assert workflow_runs(server) == runs
    denied = [
        e
        for e in api(server, "GET", "/audit?limit=1000").json()["items"]
        if e["action"] == "run.start" and e["outcome"] != "allowed"
    ]
    assert {e["principal"] for e in denied} >= {"start-reviewer"}
    by_admin = api(
        server,
        "POST",
        "/runs",
        {"workflow": "flows:sum", "input": {"a": 1, "b": 1}},
        headers={"Authorization": f"Bearer {administrator}"},
    )
    assert by_admin.status_code == 201 and ended(server, by_admin.json()["id"])["result"]["sum"] == 2


def test_atfg_runs_start_workflow_and_wait(server: ServerProcess) -> None:
    done = atfg(server, "runs", "start", "--workflow", "flows:sum", "--input", '{"a": 3, "b": 4}')
    assert done.returncode == 0, done.stderr
    run_id = done.stdout.strip()
    assert "started run" in done.stderr and "atfg runs watch" in done.stderr
    assert ended(server, run_id)["result"] == {"sum": 7, "note": ""}

    waited = atfg(
        server, "runs", "start", "-w", "flows:sum", "--input", '{"a": 5, "b": 6}', "--wait", "-o", "json"
    )
    assert waited.returncode == 0, waited.stderr
    record = json.loads(waited.stdout)
    assert (record["run"]["status"], record["run"]["result"]) == ("completed", {"sum": 11, "note": ""})
    assert "completed" in waited.stderr
    # runs watch follows a pyworkflow run too
    watched = atfg(server, "runs", "watch", run_id, "-o", "json")
    assert watched.returncode == 0 and json.loads(watched.stdout)["run"]["id"] == run_id

    failed = atfg(server, "runs", "start", "--workflow", "flows:absent", "--wait")
    assert failed.returncode == 1
    last = failed.stderr.splitlines()[-1]
    assert last.startswith("atfg: run ") and "failed" in last and "not registered" in last


@pytest.mark.parametrize(
    ("args", "code", "words"),
    [
        (("runs", "start"), 2, "give a TARGET"),
        (("runs", "start", "a.b", "--workflow", "flows:sum"), 2, "not both"),
        (("runs", "start", "--workflow", "flows:sum", "--max-attempts", "2"), 2, "--max-attempts"),
        (("runs", "start", "--workflow", "flows:sum", "--idempotency-key", "k"), 2, "--idempotency-key"),
        (("runs", "start", "--workflow", "flows:sum", "--input", "[1]"), 2, "JSON object"),
        (("runs", "start", "--workflow", "flows:sum", "--input", "{"), 2, "not valid JSON"),
        (("runs", "start", "--workflow", " "), 1, "validation_error"),
    ],
)
def test_atfg_refusals_are_one_line_and_start_nothing(
    server: ServerProcess, args: tuple[str, ...], code: int, words: str
) -> None:
    runs = workflow_runs(server)
    done = atfg(server, *args)
    assert (done.returncode, done.stdout) == (code, ""), (done.returncode, done.stdout, done.stderr)
    lines = done.stderr.splitlines()
    assert len(lines) == 1 and lines[0].startswith("atfg: ") and words in lines[0], done.stderr
    assert workflow_runs(server) == runs
