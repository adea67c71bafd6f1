"""The spec's example commands and its restart journey, with real processes and SIGKILL."""

from __future__ import annotations

import json
import subprocess
import sys
from collections.abc import Callable

from atfg_harness import REPO, ServerProcess, WorkerProcess
from atfg_waits import only_approval, reach

from atfgraph import Client

AGENT = "examples.python.features.approvals.agent:app"
RESTART_AGENT = "examples.python.features.approvals.restart_agent:app"


def review(server: ServerProcess, *args: str) -> str:
    done = subprocess.run(
        [sys.executable, "-m", "examples.python.features.approvals.review", *args],
        cwd=REPO,
        env=server.env,
        capture_output=True,
        text=True,
        timeout=90,
    )
    assert done.returncode == 0, done.stdout + done.stderr
    return done.stdout


def result_line(output: str) -> dict[str, object]:
    line = next(line for line in output.splitlines() if line.startswith("result "))
    parsed: dict[str, object] = json.loads(line.removeprefix("result "))
    return parsed


def approvals_total(server: ServerProcess) -> int:
    return len(server.get("/approvals", status="all")["items"])


async def test_the_spec_commands(server: ServerProcess, spawn_worker: Callable[..., WorkerProcess]) -> None:
    spawn_worker(AGENT)

    approved = review(server, "--ticket", "QF-4417", "--amount", "480")
    assert 'prompt     "Refund 480.0 AUD on QF-4417 (BNE-SYD)?"' in approved
    assert "decided    approved by owner" in approved
    assert result_line(approved) == {
        "amount_aud": 480.0,
        "attempts": 2,
        "decided_by": "owner",
        "prepared_on_attempt": 1,
        "response": {"note": "verified against the disruption log"},
        "status": "approved",
        "ticket": "QF-4417",
    }
    assert [line.split() for line in approved.splitlines() if line.startswith("  ")] == [
        ["refunds.request_refund", "succeeded"],
        ["refunds.assess", "succeeded"],
    ]

    rejected = review(server, "--ticket", "QF-4417", "--amount", "480", "--decision", "rejected")
    assert "decided    rejected by owner" in rejected
    assert result_line(rejected)["status"] == "rejected"
    assert approvals_total(server) == 2

    auto = review(server, "--ticket", "NZ-0882", "--amount", "150")
    assert result_line(auto) == {
        "amount_aud": 150.0,
        "attempts": 1,
        "decided_by": "desk-policy",
        "status": "approved",
        "ticket": "NZ-0882",
    }
    assert "decided    " not in auto
    assert approvals_total(server) == 2  # below the desk's limit: no approval was created
    assert server.get("/approvals")["items"] == []


async def test_unknown_ticket_fails_with_the_handlers_code(
    server: ServerProcess, spawn_worker: Callable[..., WorkerProcess], client: Client
) -> None:
    spawn_worker(AGENT)
    handle = await client.submit("refunds.request_refund", {"ticket": "XX-1", "amount_aud": 10})
    info = await reach(client, handle.id, "failed")
    assert info.error is not None
    assert (info.error.code, info.error.message) == ("ticket_not_found", "unknown ticket 'XX-1'")
    path = await handle.path()
    assert [(i.target, i.status) for i in path.items] == [
        ("refunds.request_refund", "failed"),
        ("refunds.assess", "failed"),
    ]


async def test_restart_journey_refund(
    server: ServerProcess, spawn_worker: Callable[..., WorkerProcess]
) -> None:
    worker = spawn_worker(AGENT)
    async with Client(server.url) as client:
        handle = await client.submit("refunds.request_refund", {"ticket": "QF-4417", "amount_aud": 480.0})
        await reach(client, handle.id, "waiting")
        assert len(await client.list_approvals(traverser_id=handle.id)) == 1
    # Both die with SIGKILL while the approval is pending.
    worker.kill()
    server.kill()
    server.start()  # same SQLite file
    async with Client(server.url) as client:
        approval = await only_approval(client, handle.id)
        decided = await client.decide_approval(str(approval["id"]), "approved", {"note": "after restart"})
        assert decided["status"] == "approved"
        assert (await client.get(handle.id)).status == "queued"
        spawn_worker(AGENT)
        result = await client.handle(handle.id).result(timeout=30)
        assert result["attempts"] == 2
        assert result["prepared_on_attempt"] == 1
        assert result["status"] == "approved" and result["response"] == {"note": "after restart"}
        steps = [i.target for i in (await client.path(handle.id)).items[1:]]
        assert steps == ["refunds.assess"]
        case = await client.get_checkpoint(handle.id, "refund case")
        assert case.revision == 1 and case.value["prepared_on_attempt"] == 1


async def test_restart_journey_minimal_handler(
    server: ServerProcess, spawn_worker: Callable[..., WorkerProcess]
) -> None:
    worker = spawn_worker(RESTART_AGENT)
    async with Client(server.url) as client:
        handle = await client.submit("approval.reviewed")
        await reach(client, handle.id, "waiting")
    worker.kill()
    server.kill()
    server.start()
    async with Client(server.url) as client:
        await client.decide_approval(str((await only_approval(client, handle.id))["id"]), "approved")
        spawn_worker(RESTART_AGENT)
        result = await client.handle(handle.id).result(timeout=30)
        assert result == {"decision": "approved", "saved": {"origin": "BNE", "revision": 1}}
        info = await client.get(handle.id)
        assert (info.status, info.attempt) == ("succeeded", 2)
        brief = await client.get_checkpoint(handle.id, "travel brief")
        assert (brief.value, brief.revision) == ({"origin": "BNE", "revision": 1}, 1)
