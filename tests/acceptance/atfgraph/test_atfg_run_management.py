"""Run management through the one front door, ``atfg`` (the real command against a real server
and worker): cancel with a reason and retry a failed run, for traversers and for pyworkflow runs
on the same database (pyworkflow's local runtime in this test's loop), ``atfg workers list``,
``atfg --version``, id prefixes (an ambiguous one lists the candidates), and refusals that are
one line and change nothing."""

from __future__ import annotations

import asyncio
import itertools
import json
import subprocess
import sys
from collections.abc import Iterator
from pathlib import Path
from typing import Any

import httpx
import pytest
from atfg_harness import ServerProcess, WorkerProcess, wait_until

import pyworkflow
from pyworkflow import FatalError, hook, step, workflow

ATFG = str(Path(sys.executable).parent / "atfg")
STEPS = {"prepare": 0, "charge": 0}
DOWN = {"charge": True}


@step
async def prepare() -> str:
    STEPS["prepare"] += 1
    return "prepared"


@step
async def charge() -> str:
    STEPS["charge"] += 1
    if DOWN["charge"]:
        raise FatalError("the payment service was down")
    return "charged"


@workflow
async def mgmt_order() -> list[str]:
    return [await prepare(), await charge()]


@workflow
async def mgmt_waiting() -> Any:
    return await hook("go")


@pytest.fixture(scope="module")
def server(tmp_path_factory: pytest.TempPathFactory) -> Iterator[ServerProcess]:
    proc = ServerProcess(tmp_path_factory.mktemp("atfg-mgmt"))
    for name in ("ATFGRAPH_TOKEN", "ATFGRAPH_CONFIG", "ATFGRAPH_OUTPUT"):
        proc.env.pop(name, None)
    proc.start()
    worker = WorkerProcess(proc, "atfg_agents:app").start()
    yield proc
    worker.kill()
    proc.close()


def atfg(server: ServerProcess, *args: str) -> subprocess.CompletedProcess[str]:
    return subprocess.run(
        [ATFG, *args], env=server.env, cwd=server.home, capture_output=True, text=True, timeout=90
    )


def ok(done: subprocess.CompletedProcess[str]) -> str:
    assert done.returncode == 0, (done.returncode, done.stdout, done.stderr)
    return done.stdout


def refused(done: subprocess.CompletedProcess[str], code: int) -> str:
    assert (done.returncode, done.stdout) == (code, ""), (done.returncode, done.stdout, done.stderr)
    lines = done.stderr.splitlines()
    assert len(lines) == 1 and lines[0].startswith("atfg: "), done.stderr
    return lines[0]


def api(server: ServerProcess, method: str, path: str, body: Any = None) -> httpx.Response:
    return httpx.request(
        method, f"{server.url}/api/v2{path}", json=body, headers=server.headers(), timeout=30
    )


def status_of(server: ServerProcess, run_id: str) -> dict[str, Any]:
    run: dict[str, Any] = api(server, "GET", f"/runs/{run_id}").json()["run"]
    return run


def test_version_and_workers(server: ServerProcess) -> None:
    assert ok(atfg(server, "--version")).strip() == "atfg 0.1.0"
    listed = json.loads(ok(atfg(server, "workers", "list", "-o", "json")))
    assert [w["node_id"] for w in listed] == ["tester"] and listed[0]["capacity"] == 2
    table = ok(atfg(server, "workers", "ls", "--node", "tester"))
    assert table.splitlines()[0].split()[:4] == ["ID", "NODE", "VERSION", "CAPACITY"] and "tester" in table
    assert json.loads(ok(atfg(server, "workers", "list", "--node", "nobody", "-o", "json"))) == []


def test_cancel_a_traverser_with_a_reason_by_id_prefix(server: ServerProcess) -> None:
    run_id = api(server, "POST", "/traversers", {"target": "tester.pausing", "input": {"key": "c"}}).json()[
        "id"
    ]
    wait_until(lambda: status_of(server, run_id)["traverser_status"] == "waiting", 30, "never paused")
    prefix = run_id[:16]
    out = json.loads(
        ok(atfg(server, "runs", "cancel", prefix, "--reason", "duplicate request", "-o", "json"))
    )
    assert (out["id"], out["status"], out["traverser_status"]) == (run_id, "cancelled", "cancelled")
    assert out["error"] == {"code": "cancelled", "message": "duplicate request"}
    assert api(server, "GET", f"/approvals?status=pending&traverser_id={run_id}").json()["items"] == []
    again = atfg(server, "runs", "cancel", run_id, "--reason", "again")
    assert again.returncode == 0 and "had already ended" in again.stderr
    assert status_of(server, run_id)["error"]["message"] == "duplicate request"  # unchanged
    audit = api(server, "GET", f"/audit?target={run_id}").json()["items"]
    assert any(a["action"] == "run.cancel" and a["detail"] == {"reason": "duplicate request"} for a in audit)


def test_retry_a_failed_traverser(server: ServerProcess) -> None:
    run_id = api(server, "POST", "/traversers", {"target": "tester.refuse", "max_attempts": 1}).json()["id"]
    wait_until(lambda: status_of(server, run_id)["traverser_status"] == "failed", 30, "never failed")
    out = json.loads(ok(atfg(server, "runs", "retry", run_id, "-o", "json")))
    assert out["id"] == run_id and out["kind"] == "traverser" and out["traverser_status"] == "queued"
    wait_until(lambda: status_of(server, run_id)["attempt"] == 2, 30, "the retry never ran")
    wait_until(lambda: status_of(server, run_id)["traverser_status"] == "failed", 30, "the retry never ended")
    line = refused(atfg(server, "runs", "retry", "Anope-not-a-run"), 1)
    assert "not found" in line


async def test_cancel_and_retry_pyworkflow_runs_on_the_same_database(server: ServerProcess) -> None:
    STEPS.update(prepare=0, charge=0)
    DOWN["charge"] = True
    pyworkflow.configure(storage=server.storage_url, poll_interval=0.05)
    try:
        waiting = await pyworkflow.start(mgmt_waiting)
        order = await pyworkflow.start(mgmt_order)
        await pyworkflow.wait_for_run(waiting, 30, until=("suspended",))
        assert (await pyworkflow.wait_for_run(order, 30)).status == "failed"
        assert STEPS == {"prepare": 1, "charge": 1}

        cancelled = await asyncio.to_thread(
            atfg, server, "runs", "cancel", waiting, "--reason", "not needed", "-o", "json"
        )
        out = json.loads(ok(cancelled))
        assert (out["kind"], out["status"]) == ("workflow", "cancelled")
        run = await pyworkflow.get_workflow_run(waiting)
        assert run.status == "cancelled" and run.error == {
            "type": "CancellationError",
            "message": "not needed",
        }
        assert await pyworkflow.list_pending_hooks() == []

        DOWN["charge"] = False
        retried = json.loads(ok(await asyncio.to_thread(atfg, server, "runs", "retry", order, "-o", "json")))
        assert (retried["kind"], retried["id"]) == ("workflow", order)
        done = await pyworkflow.wait_for_run(order, 30)  # this process's runtime serves it
        assert (done.status, done.result) == ("completed", ["prepared", "charged"])
        assert STEPS == {"prepare": 1, "charge": 2}  # the completed step was replayed

        again = await asyncio.to_thread(atfg, server, "runs", "retry", order)
        assert "invalid_state" in refused(again, 1) and "completed" in again.stderr
        assert (await pyworkflow.get_workflow_run(order)).status == "completed"
    finally:
        await pyworkflow.shutdown()
        pyworkflow.configure()


def test_id_prefixes_ambiguous_and_unknown(server: ServerProcess) -> None:
    made = sorted(
        api(server, "POST", "/traversers", {"target": "nobody.skill"}).json()["id"] for _ in range(17)
    )
    # 17 random hex ids: two of them share at least their first digit
    ids = next([a, b] for a, b in itertools.pairwise(made) if a[0] == b[0])
    common = 0
    while ids[0][common] == ids[1][common]:
        common += 1
    line = refused(atfg(server, "runs", "show", ids[0][:common]), 1)
    assert "ambiguous run id prefix" in line and ids[0] in line and ids[1] in line
    # The shortest prefix of the second that no other run has (one character more than the pair
    # share is not always enough: a third id may begin with those characters too, one of the 17
    # or another run in the database, seen once on PostgreSQL), as the server itself answers.
    unique = next(
        n
        for n in range(common + 1, 33)
        if api(server, "GET", "/ids?kind=run&prefix=" + ids[1][:n]).json()["items"] == [ids[1]]
    )
    shown = json.loads(ok(atfg(server, "runs", "show", ids[1][:unique], "-o", "json")))
    assert shown["id"] == ids[1]
    assert refused(atfg(server, "runs", "show", "Azzzzz"), 1) == "atfg: not found: run 'Azzzzz'"
    assert "must not be empty" in refused(atfg(server, "runs", "show", ""), 2)
    answer = api(server, "GET", "/ids?kind=run&prefix=" + ids[0][:common])
    assert answer.status_code == 200 and set(ids) <= set(answer.json()["items"])
    assert api(server, "GET", "/ids?kind=thing&prefix=A").status_code == 422
    assert api(server, "GET", "/ids?prefix=").status_code == 422


@pytest.mark.parametrize(
    ("body", "status"),
    [({"reason": 5}, 422), ({"reason": ""}, 422), ({"reason": "x" * 1001}, 422), ([1], 422)],
)
def test_bad_cancel_bodies_change_nothing(server: ServerProcess, body: Any, status: int) -> None:
    run_id = api(server, "POST", "/traversers", {"target": "nobody.skill"}).json()["id"]
    answer = api(server, "POST", f"/runs/{run_id}/cancel", body)
    assert answer.status_code == status and set(answer.json()) == {"error"}, answer.text
    assert status_of(server, run_id)["status"] == "pending"
    assert api(server, "POST", "/runs/Anope/cancel", {}).status_code == 404
    raw = httpx.post(f"{server.url}/api/v2/runs/{run_id}/cancel", content=b"{", headers=server.headers())
    assert raw.status_code == 400 and raw.json()["error"]["code"] == "invalid_json"
    assert status_of(server, run_id)["status"] == "pending"


def test_shell_completion_as_documented(server: ServerProcess) -> None:
    """docs/cli.md's line for bash, and what bash then asks the command for."""
    env = {**server.env, "_ATFG_COMPLETE": "bash_source"}
    script = subprocess.run([ATFG], env=env, capture_output=True, text=True, timeout=60)
    assert script.returncode == 0 and "_atfg_completion" in script.stdout and "complete " in script.stdout
    env = {**server.env, "_ATFG_COMPLETE": "bash_complete", "COMP_WORDS": "atfg runs re", "COMP_CWORD": "2"}
    words = subprocess.run([ATFG], env=env, capture_output=True, text=True, timeout=60)
    assert words.stdout.split() == ["plain,retry"]
    env.update(COMP_WORDS="atfg wo", COMP_CWORD="1")
    words = subprocess.run([ATFG], env=env, capture_output=True, text=True, timeout=60)
    assert words.stdout.split() == ["plain,workers"]
