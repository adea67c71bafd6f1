"""docs/atfgraph.md's Python snippets and the README's "by hand" commands run as the pages show
them, against a real server and a real worker: the agent saved as a module and served by
``python -m atfgraph.worker``, and the client snippet against the shipped refund desk (it used to
look for the approval before the handler had paused, then wait 60 s, and read a checkpoint name
the desk does not use)."""

from __future__ import annotations

import subprocess
import sys
from collections.abc import Callable
from pathlib import Path
from typing import Any

import pytest
from atfg_harness import REPO, ServerProcess, WorkerProcess

from atfgraph import Client
from doc_snippets import as_coroutine, code_blocks, shell_lines

PAGE = "docs/atfgraph.md"


async def test_the_agent_snippet_as_a_module(
    server: ServerProcess, spawn_worker: Callable[..., WorkerProcess], tmp_path: Path, client: Client
) -> None:
    folder = tmp_path / "agent"
    folder.mkdir()
    (folder / "desk.py").write_text(code_blocks(PAGE, "Write an agent", "python")[0])
    spawn_worker("desk:app", env={"PYTHONPATH": f"{folder}:{server.env['PYTHONPATH']}"})

    handle, info = await client.submit_and_wait(
        "refunds.request_refund", {"ticket": "qf-1", "amount_aud": 10.0}, statuses="waiting,terminal"
    )
    assert info.status == "waiting", info
    approval = await client.get_approval(str(info.waiting_on))
    assert (approval["operation_key"], approval["prompt"]) == ("refund:qf-1", {"question": "Refund?"})
    assert approval["checkpoint"] == {"ticket": "QF-1", "prepared_on_attempt": 1}
    await client.decide_approval(approval["id"], "rejected")
    assert await handle.result(timeout=60) == {"status": "rejected"}
    case = await client.get_checkpoint(handle.id, "case")
    assert (case.value, case.revision) == ({"ticket": "QF-1", "prepared_on_attempt": 1}, 1)

    failed = await client.submit("refunds.request_refund", {"ticket": "", "amount_aud": 1.0})
    info = await client.wait(failed.id, timeout=60)
    assert info.error is not None and (info.status, info.error.code) == ("failed", "ticket_missing")


async def test_the_client_snippet_against_the_refund_desk(
    server: ServerProcess,
    spawn_worker: Callable[..., WorkerProcess],
    monkeypatch: pytest.MonkeyPatch,
    capsys: pytest.CaptureFixture[str],
) -> None:
    spawn_worker("examples.python.features.approvals.agent:app")
    monkeypatch.setenv("ATFGRAPH_SERVER", server.url)  # Client() finds the server as the page says
    namespace: dict[str, Any] = {}
    exec(as_coroutine(code_blocks(PAGE, "The client", "python")[0]), namespace)
    await namespace["_snippet"]()
    printed = capsys.readouterr().out.splitlines()
    assert printed == ["refunds.request_refund succeeded", "refunds.assess succeeded"]
    async with Client(server.url) as client:
        (traverser,) = (await client.list_traversers("succeeded"))[:1]
        approvals = await client.list_approvals(status="all", traverser_id=traverser.id)
    assert [(a["operation_key"], a["status"], a["response"]) for a in approvals] == [
        ("refund:QF-4417", "approved", {"note": "ok"})
    ]


async def test_the_readme_by_hand_commands_leave_work_for_a_person(
    server: ServerProcess, spawn_worker: Callable[..., WorkerProcess], client: Client
) -> None:
    """README.md's "by hand" commands, each run as a shell runs it (``ID`` is the placeholder for
    an approval id the page asks the reader to fill in)."""
    spawn_worker("examples.python.features.approvals.agent:app")
    lines = shell_lines(code_blocks("README.md", "Two commands", "sh")[1])
    export, *commands = lines
    assert export == "export ATFGRAPH_SERVER=http://127.0.0.1:7878"
    env = dict(server.env)  # the test's server instead of the default port
    bin_dir = str(Path(sys.executable).parent) + "/"
    outputs = []
    decided: dict[str, Any] = {}
    for command in commands:
        if " ID " in command:
            pending = await client.list_approvals()
            assert len(pending) == 2  # one from `atfg runs start`, one from `review --no-decide`
            assert {a["status"] for a in pending} == {"pending"}
            decided = pending[0]
            command = command.replace(" ID ", f" {decided['id']} ")
        done = subprocess.run(
            command.replace(".venv/bin/", bin_dir),
            shell=True,
            cwd=REPO,
            env=env,
            capture_output=True,
            text=True,
            timeout=120,
        )
        assert done.returncode == 0, (command, done.stdout, done.stderr)
        outputs.append(done.stdout)
    started, no_decide = outputs[0].strip(), outputs[1]
    assert "(pending: it waits for a person)" in no_decide
    assert outputs[-1].count("decided    approved by owner") == 1  # the last one decides itself
    assert decided["traverser_id"] == started  # the oldest pending approval: `atfg runs start`'s
    assert (await client.handle(started).result(timeout=60))["response"] == {"note": "ok"}
    still_waiting = [t.id for t in await client.list_traversers("waiting")]
    assert len(still_waiting) == 1 and still_waiting[0] in no_decide  # still waits for a person


async def test_the_decision_link_made_with_its_approval_snippet(
    server: ServerProcess, spawn_worker: Callable[..., WorkerProcess], tmp_path: Path, client: Client
) -> None:
    """docs/reviewers.md, "A link made with its approval": served as a module, the handler hands
    the link's URL on once (here: printed to the worker's log); the link decides; the handler
    running again makes no second link."""
    import re

    import httpx
    from atfg_harness import wait_until

    folder = tmp_path / "linked"
    folder.mkdir()
    (folder / "linked_desk.py").write_text(
        code_blocks("docs/reviewers.md", "A link made with its approval", "python")[0]
    )
    worker = spawn_worker("linked_desk:app", env={"PYTHONPATH": f"{folder}:{server.env['PYTHONPATH']}"})
    handle, info = await client.submit_and_wait(
        "refunds.request_refund", {"ticket": "QF-4417", "amount_aud": 480.0}, statuses="waiting,terminal"
    )
    assert info.status == "waiting", info

    def sent() -> list[str]:
        return re.findall(r"decide refund: (\S+) \(link ", worker.log.read_text())

    wait_until(lambda: len(sent()) == 1, 20, f"the handler handed on no URL; see {worker.log}")
    (url,) = sent()
    async with httpx.AsyncClient(timeout=30) as anonymous:
        page = await anonymous.get(url)
        assert page.status_code == 200 and "<strong>480.0 AUD</strong>" in page.text
        assert (await anonymous.post(url, data={"decision": "approved"})).status_code == 200
    result = await handle.result(timeout=60)
    assert result["status"] == "approved" and result["decided_by"].startswith("link:")
    assert len(sent()) == 1
    links = await client.list_links(str(info.waiting_on))
    assert [(x["label"], x["state"]) for x in links] == [("duty manager", "used")]
