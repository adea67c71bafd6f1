"""``atfg runs start``: the real command against a real server with the spec's refunds agent in a
worker process. A started run waits for a person like any other; bad input is one line on stderr,
a non-zero exit, and nothing started."""

from __future__ import annotations

import json
import subprocess
import sys
from collections.abc import Iterator
from pathlib import Path
from typing import Any

import httpx
import pytest
from atfg_harness import ServerProcess, WorkerProcess

ATFG = str(Path(sys.executable).parent / "atfg")
AGENT = "examples.python.features.approvals.agent:app"
HEX32 = 32


@pytest.fixture(scope="module")
def server(tmp_path_factory: pytest.TempPathFactory) -> Iterator[ServerProcess]:
    proc = ServerProcess(tmp_path_factory.mktemp("atfg-start"))
    for name in ("ATFGRAPH_TOKEN", "ATFGRAPH_CONFIG", "ATFGRAPH_OUTPUT"):
        proc.env.pop(name, None)
    proc.start()
    worker = WorkerProcess(proc, AGENT).start()
    yield proc
    worker.kill()
    proc.close()


def atfg(server: ServerProcess, *args: str, stdin: str | None = None) -> subprocess.CompletedProcess[str]:
    return subprocess.run(
        [ATFG, *args],
        env=server.env,
        cwd=server.home,
        input=stdin,
        capture_output=True,
        text=True,
        timeout=90,
    )


def ok(done: subprocess.CompletedProcess[str]) -> str:
    assert done.returncode == 0, (done.returncode, done.stdout, done.stderr)
    return done.stdout


def refused(done: subprocess.CompletedProcess[str], code: int) -> str:
    """One line on stderr starting with ``atfg: ``, nothing on stdout, exit ``code``."""
    assert (done.returncode, done.stdout) == (code, ""), (done.returncode, done.stdout, done.stderr)
    lines = done.stderr.splitlines()
    assert len(lines) == 1 and lines[0].startswith("atfg: "), done.stderr
    return lines[0]


def waiting(server: ServerProcess, run_id: str) -> dict[str, Any]:
    """The run once it waits for a person (one long poll, answered the moment it pauses)."""
    response = httpx.get(
        f"{server.url}/api/v2/traversers/{run_id}",
        params={"wait_for": "waiting,terminal", "timeout": 60},
        headers=server.headers(),
        timeout=75,
    )
    response.raise_for_status()
    view: dict[str, Any] = response.json()
    return view


def traversers(server: ServerProcess) -> list[dict[str, Any]]:
    items: list[dict[str, Any]] = []
    for status in ("queued", "running", "waiting", "succeeded", "failed", "cancelled"):
        items += server.get("/traversers", status=status, limit=1000)["items"]
    return items


def test_start_prints_the_run_id_and_the_run_waits_for_a_person(server: ServerProcess) -> None:
    done = atfg(
        server,
        "runs",
        "start",
        "refunds.request_refund",
        "--input",
        '{"ticket": "QF-4417", "amount_aud": 480}',
    )
    run_id = ok(done).strip()
    assert len(run_id) == HEX32 and run_id.isalnum()
    assert f"atfg runs watch {run_id}" in done.stderr
    assert waiting(server, run_id)["status"] == "waiting"
    listed = [i for i in json.loads(ok(atfg(server, "ps", "-o", "json"))) if i["id"] == run_id]
    assert [(i["status"], i["operation_key"]) for i in listed] == [("waiting", "refund:QF-4417")]


def test_start_from_a_file_then_decide_and_wait(server: ServerProcess, tmp_path: Path) -> None:
    path = tmp_path / "refund.json"
    path.write_text(json.dumps({"ticket": "QF-4417", "amount_aud": 333.0, "reason": "from a file"}))
    record = json.loads(
        ok(atfg(server, "runs", "start", "refunds.request_refund", "--input", f"@{path}", "-o", "json"))
    )
    assert record["target"] == "refunds.request_refund" and record["input"]["amount_aud"] == 333.0
    run_id = record["id"]
    follow = subprocess.Popen(
        [ATFG, "runs", "watch", run_id, "-o", "json", "--timeout", "120"],
        env=server.env,
        cwd=server.home,
        stdout=subprocess.PIPE,
        stderr=subprocess.PIPE,
        text=True,
    )
    try:
        assert waiting(server, run_id)["status"] == "waiting"
        pending = json.loads(ok(atfg(server, "approvals", "list", "--run", run_id, "-o", "json")))
        assert len(pending) == 1
        ok(
            atfg(
                server, "approvals", "decide", pending[0]["id"], "--approve", "--response", '{"note": "file"}'
            )
        )
        out, err = follow.communicate(timeout=120)
    finally:
        if follow.poll() is None:
            follow.kill()
            follow.communicate()
    assert follow.returncode == 0, err
    final = json.loads(out)
    assert final["status"] == "succeeded"
    assert final["result"]["response"] == {"note": "file"} and final["result"]["amount_aud"] == 333.0


def test_start_wait_follows_to_the_result(server: ServerProcess) -> None:
    done = atfg(
        server,
        "runs",
        "start",
        "refunds.request_refund",
        "--input",
        "@-",
        "--wait",
        "--timeout",
        "120",
        "-o",
        "json",
        stdin='{"ticket": "NZ-0882", "amount_aud": 150}',  # under the desk's limit: no person needed
    )
    final = json.loads(ok(done))
    assert final["status"] == "succeeded" and final["result"]["decided_by"] == "desk-policy"
    assert "succeeded" in done.stderr  # status changes on stderr


def test_start_wait_on_a_failing_run_exits_1_with_its_error(server: ServerProcess) -> None:
    done = atfg(
        server,
        "runs",
        "start",
        "refunds.request_refund",
        "--input",
        '{"ticket": "XX-1", "amount_aud": 5}',
        "--wait",
    )
    assert done.returncode == 1, done
    assert done.stderr.splitlines()[-1].endswith("failed: ticket_not_found: unknown ticket 'XX-1'")


@pytest.mark.parametrize(
    ("args", "code", "says"),
    [
        (["--input", "{not json"], 2, "atfg: --input: not valid JSON"),
        (
            ["--input", "@/nonexistent/refund.json"],
            2,
            "atfg: --input: cannot read '/nonexistent/refund.json'",
        ),
        (["--input", "[1, 2]"], 2, "atfg: --input: must be a JSON object"),
        (
            ["--input", '{"amount": 18446744073709551617}'],
            2,
            "atfg: --input: not JSON the server keeps exactly",
        ),
        (["--max-attempts", "0"], 2, "atfg: Invalid value for '--max-attempts'"),
    ],
)
def test_bad_input_is_one_line_and_starts_nothing(
    server: ServerProcess, args: list[str], code: int, says: str
) -> None:
    before = len(traversers(server))
    line = refused(atfg(server, "runs", "start", "refunds.request_refund", *args), code)
    assert line.startswith(says), line
    assert len(traversers(server)) == before


@pytest.mark.parametrize(
    ("target", "says"),
    [
        (
            "payments.charge",
            "atfg: unknown target 'payments.charge': no worker serves node 'payments'"
            " (nodes with workers: refunds)",
        ),
        ("refunds", "atfg: validation_error: body.target must look like 'node.skill'"),
        (".assess", "atfg: validation_error: body.target must look like 'node.skill'"),
    ],
)
def test_unknown_target_is_one_line_and_starts_nothing(server: ServerProcess, target: str, says: str) -> None:
    before = len(traversers(server))
    line = refused(atfg(server, "runs", "start", target), 1)
    assert line.startswith(says), line
    assert len(traversers(server)) == before


def test_no_check_queues_for_a_worker_that_starts_later(server: ServerProcess) -> None:
    run_id = ok(atfg(server, "runs", "start", "later.job", "--no-check")).strip()
    assert server.get(f"/traversers/{run_id}")["status"] == "queued"
    assert json.loads(ok(atfg(server, "runs", "show", run_id, "-o", "json")))["target"] == "later.job"


def test_repeated_idempotency_key_returns_the_first_run(server: ServerProcess) -> None:
    args = ["runs", "start", "refunds.request_refund", "--input", '{"ticket": "NZ-0882", "amount_aud": 10}']
    first = ok(atfg(server, *args, "--idempotency-key", "start-once")).strip()
    again = ok(atfg(server, *args, "--idempotency-key", "start-once")).strip()
    assert first == again


def test_runs_start_is_in_the_help(server: ServerProcess) -> None:
    assert "start, submit" in ok(atfg(server, "runs", "--help"))
