"""docs/atfgraph.md's Python snippets run as the page shows them, against a real server and a real
worker: the agent saved as a module and served by ``python -m atfgraph.worker``, and the client
snippet against the shipped refund desk (it used to look for the approval before the handler had
paused, then wait 60 s, and read a checkpoint name the desk does not use)."""

from __future__ import annotations

from collections.abc import Callable
from pathlib import Path
from typing import Any

import pytest
from atfg_harness import ServerProcess, WorkerProcess

from atfgraph import Client
from doc_snippets import as_coroutine, code_blocks

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
