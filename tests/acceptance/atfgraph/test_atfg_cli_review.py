"""``atfg`` as a reviewer and an operator use it: the real command against a real server, with the
spec's refunds agent in a worker process. One server for the module (start-up is the slow part);
every test makes its own runs and tokens."""

from __future__ import annotations

import json
import os
import select
import subprocess
import sys
import textwrap
import time
from collections.abc import Iterator
from pathlib import Path
from typing import IO, Any

import pytest
from atfg_harness import REPO, ServerProcess, WorkerProcess, free_port

import pyworkflow
from atfgraph import Client
from pyworkflow import hook, workflow

ATFG = str(Path(sys.executable).parent / "atfg")
AGENT = "examples.python.features.approvals.agent:app"


def first_line(stream: IO[str], seconds: float = 30) -> str:
    """The next line a subprocess writes, failing (not hanging) when none comes in time."""
    ready, _, _ = select.select([stream], [], [], seconds)
    assert ready, f"no output within {seconds}s"
    return stream.readline()


@pytest.fixture(scope="module")
def server(tmp_path_factory: pytest.TempPathFactory) -> Iterator[ServerProcess]:
    proc = ServerProcess(tmp_path_factory.mktemp("atfg-cli"))
    for name in ("ATFGRAPH_TOKEN", "ATFGRAPH_CONFIG", "ATFGRAPH_OUTPUT"):
        proc.env.pop(name, None)
    proc.start()
    worker = WorkerProcess(proc, AGENT).start()
    yield proc
    worker.kill()
    proc.close()


def credential(server: ServerProcess, kind: str) -> str:
    token: str = json.loads((server.home / "credentials.json").read_text())[kind]
    return token


def atfg(
    server: ServerProcess,
    *args: str,
    env: dict[str, str] | None = None,
    stdin: str | None = None,
    timeout: float = 60,
) -> subprocess.CompletedProcess[str]:
    return subprocess.run(
        [ATFG, *args],
        env={**server.env, **(env or {})},
        cwd=server.home,
        input=stdin,
        capture_output=True,
        text=True,
        timeout=timeout,
    )


def ok(done: subprocess.CompletedProcess[str]) -> str:
    assert done.returncode == 0, (done.returncode, done.stdout, done.stderr)
    return done.stdout


def failed(done: subprocess.CompletedProcess[str], code: int) -> str:
    """The one stderr line of a failed command (and nothing on stdout)."""
    assert done.returncode == code, (done.returncode, done.stdout, done.stderr)
    assert done.stdout == ""
    lines = done.stderr.splitlines()
    assert len(lines) == 1, done.stderr
    return lines[0]


def as_json(done: subprocess.CompletedProcess[str]) -> Any:
    return json.loads(ok(done))


def jsonl(done: subprocess.CompletedProcess[str]) -> list[Any]:
    return [json.loads(line) for line in ok(done).splitlines()]


def rows(table: str) -> list[list[str]]:
    """The data rows of a plain (non-TTY) table: no colour codes, one line per row."""
    assert "\x1b[" not in table
    lines = table.splitlines()
    assert set(lines[1].strip()) == {"─"}, table
    return [line.split() for line in lines[2:]]


async def waiting_refund(server: ServerProcess, ticket: str = "QF-4417") -> tuple[str, str]:
    """A refund run paused on its approval: (run id, approval id)."""
    async with Client(server.url, token=credential(server, "owner")) as client:
        handle, info = await client.submit_and_wait(
            "refunds.request_refund", {"ticket": ticket, "amount_aud": 480.0}, statuses="waiting", timeout=30
        )
        assert info.status == "waiting" and info.waiting_on, info
        return handle.id, info.waiting_on


async def test_decide_resumes_the_run_that_watch_follows(server: ServerProcess, tmp_path: Path) -> None:
    run, approval = await waiting_refund(server)

    [row] = [r for r in rows(ok(atfg(server, "ps"))) if r[0] == run]
    assert row[:6] == [run, "refunds.request_refund", "waiting", "1/3", approval, "refund:QF-4417"]
    [item] = [i for i in as_json(atfg(server, "ps", "-o", "json")) if i["id"] == run]
    assert (item["waiting_on"], item["operation_key"]) == (approval, "refund:QF-4417")

    pending = jsonl(atfg(server, "approvals", "list", "-o", "jsonl"))
    assert approval in [a["id"] for a in pending]
    shown = as_json(atfg(server, "ap", "show", approval, "-o", "json"))
    assert shown["prompt"]["question"] == "Refund 480.0 AUD on QF-4417 (BNE-SYD)?"
    assert shown["checkpoint"]["prepared_on_attempt"] == 1
    table = ok(atfg(server, "approvals", "show", approval))
    assert '"question": "Refund 480.0 AUD on QF-4417 (BNE-SYD)?"' in table

    watch = subprocess.Popen(
        [ATFG, "runs", "watch", run, "-o", "json"],
        env=server.env,
        stdout=subprocess.PIPE,
        stderr=subprocess.PIPE,
        text=True,
    )
    try:
        assert watch.stderr is not None
        first = first_line(watch.stderr)  # the watcher has seen the run waiting
        note = tmp_path / "response.json"
        # Agent output and reviewer text are data, never rich markup.
        note.write_text(json.dumps({"note": "[bold]checked[/bold] against the disruption log"}))
        decided = as_json(
            atfg(server, "approvals", "decide", approval, "--approve", "--response", f"@{note}", "-o", "json")
        )
        assert (decided["status"], decided["decided_by"]) == ("approved", "owner")
        out, err = watch.communicate(timeout=30)
    finally:
        watch.kill()
    assert watch.returncode == 0, err
    final = json.loads(out)
    assert (final["id"], final["status"], final["attempt"]) == (run, "succeeded", 2)
    assert final["result"]["response"] == {"note": "[bold]checked[/bold] against the disruption log"}
    assert first.split()[1:3] == [run, "waiting"] and f"waiting on approval {approval}" in first
    statuses = [line.split()[2] for line in err.splitlines()]
    # Every change in order (one that passes within a single poll may be folded into the next).
    assert statuses[-1] == "succeeded" and statuses == [
        s for s in ["queued", "running", "succeeded"] if s in statuses
    ], err

    # The same decision again changes nothing; a different one is refused in one line.
    assert (
        as_json(atfg(server, "approvals", "decide", approval, "--approve", "-o", "json"))["status"]
        == "approved"
    )
    line = failed(atfg(server, "approvals", "decide", approval, "--reject"), 1)
    assert line.startswith("atfg: approval_decided: ")

    shown_run = ok(atfg(server, "runs", "show", run))
    assert "[bold]checked[/bold] against the disruption log" in shown_run
    assert ["1:refunds.assess", "refunds.assess", "succeeded", "1"] in [
        r[:4] for r in shown_run_path(shown_run)
    ]
    case = as_json(atfg(server, "checkpoints", "get", run, "refund case", "-o", "json"))
    assert (case["revision"], case["value"]["prepared_on_attempt"], case["value"]["ticket"]) == (
        1,
        1,
        "QF-4417",
    )
    assert "prepared_on_attempt" in ok(atfg(server, "cp", "get", run, "refund case"))
    assert run not in [i["id"] for i in as_json(atfg(server, "ps", "-o", "json"))]


def shown_run_path(output: str) -> list[list[str]]:
    lines = output.splitlines()
    start = lines.index(next(line for line in lines if line.startswith("STEP ")))
    return [line.split() for line in lines[start + 2 :] if line.strip()]


async def test_follow_a_failing_run_and_list_runs(server: ServerProcess) -> None:
    async with Client(server.url, token=credential(server, "owner")) as client:
        handle = await client.submit("refunds.request_refund", {"ticket": "XX-1", "amount_aud": 10})
    done = atfg(server, "runs", "show", handle.id, "--follow", "-o", "json")
    assert done.returncode == 1, done.stderr
    assert json.loads(done.stdout)["error"]["code"] == "ticket_not_found"
    assert done.stderr.splitlines()[-1] == (
        f"atfg: run {handle.id} failed: ticket_not_found: unknown ticket 'XX-1'"
    )
    listed = jsonl(atfg(server, "runs", "list", "--status", "failed", "-o", "jsonl"))
    assert handle.id in [r["id"] for r in listed]
    assert {r["status"] for r in listed} == {"failed"}
    everything = as_json(atfg(server, "-o", "json", "r", "ls"))  # -o before the command, aliases
    assert handle.id in [r["id"] for r in everything]
    created = [r["created_at"] for r in everything]
    assert created == sorted(created, reverse=True)
    [row] = [r for r in rows(ok(atfg(server, "runs", "list"))) if r[0] == handle.id]
    assert row[1:4] == ["refunds.request_refund", "failed", "1/3"]


async def test_a_worker_token_cannot_decide(server: ServerProcess) -> None:
    run, approval = await waiting_refund(server, "QF-4417")
    line = failed(
        atfg(server, "approvals", "decide", approval, "--approve", "--token", credential(server, "worker")), 3
    )
    assert line.startswith("atfg: forbidden: role 'worker' may not approval.decide")
    # No credential at all (an empty data directory, no $ATFGRAPH_TOKEN): 401, also exit 3.
    anonymous = atfg(server, "approvals", "list", env={"ATFGRAPH_HOME": str(server.home / "nobody")})
    assert failed(anonymous, 3).startswith("atfg: unauthenticated: ")
    assert as_json(atfg(server, "approvals", "show", approval, "-o", "json"))["status"] == "pending"
    audit = as_json(atfg(server, "audit", "list", "-o", "json"))
    denied = [e for e in audit if approval in (e["target"] or "") and e["outcome"] == "denied"]
    assert [(e["role"], e["action"]) for e in denied] == [("worker", "approval.decide")]
    ok(
        atfg(
            server,
            "approvals",
            "decide",
            approval,
            "--reject",
            "--response",
            "@-",
            stdin='{"why": "duplicate"}',
        )
    )
    async with Client(server.url, token=credential(server, "owner")) as client:
        info = await client.wait(run, timeout=30)
    assert info.result["status"] == "rejected" and info.result["response"] == {"why": "duplicate"}


def test_tokens_create_list_revoke(server: ServerProcess) -> None:
    created = atfg(server, "tokens", "create", "night reviewer", "--role", "reviewer")
    token = ok(created).strip()
    assert token.startswith("atfg_") and len(ok(created).splitlines()) == 1
    assert "shown once" in created.stderr
    as_reviewer = {"ATFGRAPH_TOKEN": token}
    assert isinstance(as_json(atfg(server, "approvals", "list", "-o", "json", env=as_reviewer)), list)
    refused = failed(atfg(server, "tokens", "create", "sneaky", "--role", "owner", env=as_reviewer), 3)
    assert refused.startswith("atfg: forbidden: ")

    listed = as_json(atfg(server, "tokens", "list", "-o", "json"))
    [info] = [t for t in listed if t["name"] == "night reviewer"]
    assert (info["role"], info["created_by"], info["revoked_at"]) == ("reviewer", "owner", None)
    assert token not in json.dumps(listed)
    assert ["owner", "owner"] in [r[1:3] for r in rows(ok(atfg(server, "token", "ls")))]

    revoked = atfg(server, "tokens", "revoke", info["id"], "-o", "json")
    assert as_json(revoked)["revoked"] is True and as_json(revoked)["info"]["revoked_at"] is not None
    assert f"revoked token {info['id']}" in revoked.stderr
    assert failed(atfg(server, "approvals", "list", env=as_reviewer), 3).startswith("atfg: unauthenticated: ")
    again = atfg(server, "tokens", "rm", info["id"], "-o", "jsonl")
    assert jsonl(again)[0]["revoked"] is False and "already revoked" in again.stderr
    assert failed(atfg(server, "tokens", "revoke", "0123456789abcdef"), 1) == (
        "atfg: not found: token '0123456789abcdef'"
    )
    assert failed(atfg(server, "tokens", "create", "x", "--role", "king"), 2).startswith("atfg: ")
    json_created = as_json(atfg(server, "tokens", "create", "ci", "--role", "worker", "-o", "json"))
    assert json_created["token"].startswith("atfg_") and json_created["info"]["role"] == "worker"


_PYWORKFLOW_RUN = textwrap.dedent(
    """
    import asyncio, json, sys
    from pyworkflow import configure, hook, start, wait_for_run, shutdown, workflow

    @workflow
    async def needs_an_operator(ticket: str) -> dict:
        answer = await hook("operator_answer")
        return {"ticket": ticket, "answer": answer}

    async def main() -> None:
        configure(sys.argv[1])
        run_id = await start(needs_an_operator, "QF-4417")
        print(json.dumps({"run_id": run_id}), flush=True)
        run = await wait_for_run(run_id, timeout=60)
        print(json.dumps({"status": str(run.status), "result": run.result}), flush=True)
        await shutdown()

    asyncio.run(main())
    """
)


def test_hooks_list_and_resume(server: ServerProcess) -> None:
    """A pyworkflow run in the server's database parks on a hook; the CLI finds and resumes it,
    and the run (executed by its own process's runtime) finishes with the payload."""
    proc = subprocess.Popen(
        [sys.executable, "-c", _PYWORKFLOW_RUN, server.storage_url],
        cwd=REPO,
        env=server.env,
        stdout=subprocess.PIPE,
        stderr=subprocess.PIPE,
        text=True,
    )
    try:
        assert proc.stdout is not None
        run_id = json.loads(first_line(proc.stdout))["run_id"]
        deadline = time.monotonic() + 20
        while True:
            hooks = [h for h in as_json(atfg(server, "hooks", "list", "-o", "json")) if h["run_id"] == run_id]
            if hooks or time.monotonic() > deadline:
                break
            time.sleep(0.1)
        [hook] = hooks
        assert (hook["name"], hook["kind"]) == ("operator_answer", "hook")
        assert [r[:4] for r in rows(ok(atfg(server, "hooks", "ls"))) if r[0] == hook["id"]] == [
            [hook["id"], run_id, "hook", "operator_answer"]
        ]
        resumed = as_json(
            atfg(server, "hook", "resume", hook["id"], "--payload", '{"refund": "approved"}', "-o", "json")
        )
        assert (resumed["run_id"], resumed["hook_id"], resumed["hook_name"]) == (
            run_id,
            hook["id"],
            "operator_answer",
        )
        out, err = proc.communicate(timeout=60)
    finally:
        proc.kill()
    assert json.loads(out) == {
        "status": "completed",
        "result": {"ticket": "QF-4417", "answer": {"refund": "approved"}},
    }, err
    assert hook["id"] not in [h["id"] for h in as_json(atfg(server, "hooks", "list", "-o", "json"))]
    assert failed(atfg(server, "hooks", "resume", hook["id"]), 1).startswith("atfg: ")
    assert (
        failed(atfg(server, "hooks", "resume", "nope", "--payload", "{}"), 1)
        == "atfg: not found: hook 'nope'"
    )


def test_errors_are_one_line(server: ServerProcess, tmp_path: Path) -> None:
    assert failed(atfg(server, "runs", "show", "nope"), 1) == "atfg: not found: run 'nope'"
    assert failed(atfg(server, "runs", "watch", "nope"), 1) == "atfg: not found: run 'nope'"
    assert failed(atfg(server, "approvals", "show", "nope"), 1) == "atfg: not found: approval 'nope'"
    assert (
        failed(atfg(server, "approvals", "decide", "nope", "--approve"), 1)
        == "atfg: not found: approval 'nope'"
    )
    assert (
        failed(atfg(server, "checkpoints", "get", "nope", "case"), 1) == "atfg: not found: traverser 'nope'"
    )

    down = f"http://127.0.0.1:{free_port()}"
    line = failed(atfg(server, "ps", "--server", down), 2)
    assert line.startswith(f"atfg: cannot reach the atfgraph server at {down}")
    assert failed(atfg(server, "runs", "list", env={"ATFGRAPH_SERVER": down}), 2).startswith(
        f"atfg: cannot reach the atfgraph server at {down}"
    )

    bad = failed(atfg(server, "approvals", "decide", "nope", "--approve", "--response", "{not json"), 2)
    assert bad.startswith("atfg: --response: not valid JSON: ")
    missing = tmp_path / "missing.json"
    assert failed(atfg(server, "approvals", "decide", "x", "--reject", "--response", f"@{missing}"), 2) == (
        f"atfg: --response: cannot read '{missing}': No such file or directory"
    )
    garbage = tmp_path / "garbage.json"
    garbage.write_text("[1, 2")
    assert failed(atfg(server, "hooks", "resume", "x", "--payload", f"@{garbage}"), 2).startswith(
        f"atfg: --payload: not valid JSON in '{garbage}': "
    )
    # Usage errors keep click's exit code 2, in one line that says where help is.
    assert failed(atfg(server, "approvals", "decide", "x"), 2) == (
        "atfg: give exactly one of --approve or --reject (see 'atfg approvals decide --help')"
    )
    assert failed(atfg(server, "approvals", "decide", "x", "--approve", "--reject"), 2).startswith(
        "atfg: give exactly one"
    )
    assert (
        failed(atfg(server, "runs", "show"), 2)
        == "atfg: Missing argument 'ID'. (see 'atfg runs show --help')"
    )
    assert failed(atfg(server, "runs", "frobnicate"), 2).startswith("atfg: No such command 'frobnicate'")
    assert failed(atfg(server, "ps", "-o", "yaml"), 2).startswith("atfg: Invalid value for '-o' / '--output'")


def test_settings_flag_over_environment_over_config(server: ServerProcess, tmp_path: Path) -> None:
    down = f"http://127.0.0.1:{free_port()}"
    config = tmp_path / "config.toml"
    config.write_text(f'server = "{down}"\noutput = "jsonl"\n')
    env = {"ATFGRAPH_CONFIG": str(config)}
    # The environment beats the config file's server; the config file's output applies.
    assert isinstance(jsonl(atfg(server, "runs", "list", env=env)), list)
    # Without $ATFGRAPH_SERVER the config file's server is used...
    no_env = {k: v for k, v in server.env.items() if k != "ATFGRAPH_SERVER"}
    alone = subprocess.run(
        [ATFG, "runs", "list"], env={**no_env, **env}, capture_output=True, text=True, timeout=30
    )
    assert failed(alone, 2).startswith(f"atfg: cannot reach the atfgraph server at {down}")
    # ...and a flag beats both; $ATFGRAPH_OUTPUT beats the config file, -o beats $ATFGRAPH_OUTPUT.
    assert isinstance(as_json(atfg(server, "runs", "list", env={**env, "ATFGRAPH_OUTPUT": "json"})), list)
    flagged = subprocess.run(
        [ATFG, "runs", "list", "--server", server.url, "-o", "table"],
        env={**no_env, **env, "ATFGRAPH_OUTPUT": "json"},
        capture_output=True,
        text=True,
        timeout=30,
    )
    assert ok(flagged).startswith("ID ")
    # With neither, the server a local server wrote beside its credentials.
    bare = subprocess.run(
        [ATFG, "runs", "list", "-o", "json"], env=no_env, capture_output=True, text=True, timeout=30
    )
    assert isinstance(as_json(bare), list)
    # A leaf's flag wins over the same flag given before the command.
    assert isinstance(
        as_json(atfg(server, "--server", down, "runs", "list", "--server", server.url, "-o", "json")), list
    )
    # --token beats $ATFGRAPH_TOKEN, which beats the credentials file.
    bad = {"ATFGRAPH_TOKEN": "atfg_0000000000000000_" + "A" * 32}
    assert failed(atfg(server, "runs", "list", env=bad), 3).startswith("atfg: unauthenticated")
    ok(atfg(server, "runs", "list", "--token", credential(server, "owner"), env=bad))


def test_python_dash_m_is_the_same_command(server: ServerProcess) -> None:
    done = subprocess.run(
        [sys.executable, "-m", "atfgraph.cli", "runs", "list", "-o", "json"],
        env=server.env,
        capture_output=True,
        text=True,
        timeout=30,
    )
    assert isinstance(as_json(done), list)
    helped = ok(atfg(server, "--help"))
    for noun in (
        "ps",
        "runs, r, run",
        "approvals, ap, approval",
        "checkpoints, checkpoint, cp",
        "tokens, token",
        "hooks, hook",
        "db",
        "server",
    ):
        assert noun in helped
    assert os.path.basename(ATFG) == "atfg"


def test_tables_are_coloured_only_on_a_terminal(server: ServerProcess) -> None:
    import pty

    primary, secondary = pty.openpty()
    proc = subprocess.Popen(
        [ATFG, "runs", "list"], env=server.env, stdout=secondary, stderr=subprocess.DEVNULL
    )
    os.close(secondary)
    chunks = []
    while True:
        try:
            chunk = os.read(primary, 65536)
        except OSError:  # EIO: the command closed the terminal
            break
        if not chunk:
            break
        chunks.append(chunk)
    os.close(primary)
    assert proc.wait(30) == 0
    assert b"\x1b[" in b"".join(chunks)
    assert "\x1b[" not in ok(atfg(server, "runs", "list"))


@workflow
async def cli_listed(doc: str) -> dict[str, Any]:
    answer = await hook("cli_answer", payload_schema={"type": "object"})
    return {"doc": doc, "answer": answer}


async def test_runs_list_and_show_pyworkflow_runs_beside_traversers(server: ServerProcess) -> None:
    async with Client(server.url, token=credential(server, "owner")) as client:
        handle = await client.submit("refunds.request_refund", {"ticket": "XX-2", "amount_aud": 10})
    pyworkflow.configure(storage=server.storage_url, poll_interval=0.05)
    try:
        run_id = await pyworkflow.start(cli_listed, "notes")
        await pyworkflow.wait_for_run(run_id, timeout=15, until=("suspended",))

        everything = as_json(atfg(server, "runs", "list", "-o", "json"))
        kinds = {r["id"]: r["kind"] for r in everything}
        assert (kinds[run_id], kinds[handle.id]) == ("workflow", "traverser")
        workflows = jsonl(atfg(server, "r", "ls", "--kind", "workflow", "-o", "jsonl"))
        assert run_id in [r["id"] for r in workflows] and {r["kind"] for r in workflows} == {"workflow"}
        traversers = as_json(atfg(server, "runs", "list", "-k", "traverser", "-o", "json"))
        assert handle.id in [r["id"] for r in traversers] and run_id not in [r["id"] for r in traversers]
        # The engine's name or the API's: 'waiting' and 'suspended' are one status.
        for args in (
            ["--status", "suspended"],
            ["--status", "waiting"],
            ["--status", "waiting", "--status", "suspended"],
        ):
            listed = as_json(atfg(server, "runs", "list", *args, "-k", "workflow", "-o", "json"))
            assert [r["id"] for r in listed].count(run_id) == 1, args
        [row] = [r for r in rows(ok(atfg(server, "runs", "list"))) if r[0] == run_id]
        assert row[2:5] == ["suspended", "-", "workflow"] and row[1].endswith("cli_listed")

        shown = ok(atfg(server, "runs", "show", run_id))
        assert "cli_answer" in shown and "run_created" in shown and "wait_created" in shown
        record = as_json(atfg(server, "run", "get", run_id, "-o", "json"))
        assert record["run"]["kind"] == "workflow" and record["run"]["status"] == "suspended"
        assert [(w["kind"], w["name"]) for w in record["waits"]] == [("hook", "cli_answer")]
        assert record["events"][0]["type"] == "run_created"
        # A traverser is shown as before: its record from /traversers.
        assert (
            as_json(atfg(server, "runs", "show", handle.id, "-o", "json"))["target"]
            == "refunds.request_refund"
        )

        assert failed(atfg(server, "runs", "list", "--kind", "bogus"), 2).startswith("atfg: Invalid value")
        assert failed(atfg(server, "runs", "list", "--status", "bogus"), 2).startswith("atfg: Invalid value")
        worker = credential(server, "worker")
        line = failed(atfg(server, "runs", "list", "--token", worker), 3)
        assert line.startswith("atfg: forbidden: role 'worker' may not run.list")
        line = failed(atfg(server, "runs", "show", run_id, "--token", worker), 3)
        assert line.startswith("atfg: forbidden: role 'worker' may not run.get")
    finally:
        await pyworkflow.shutdown()
        pyworkflow.configure()
