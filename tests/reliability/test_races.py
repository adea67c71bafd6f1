"""Races between real processes (issue 11, B.2): 64 concurrent decisions on one approval over
HTTP against a real graph server, 32 concurrent ``resume_hook`` calls on one token through one
store, and 16 compare-and-set writers on one checkpoint and on one memory key; then the same
decisions and compare-and-set writes spread over two graph servers sharing one PostgreSQL.

Each race repeats ``REPEATS`` times (times ``RELIABILITY_SCALE``). The invariants are in
``_races_harness``: one accepted decision and the run resumed once, one winning resume and its
step run once, no lost update and strictly increasing revisions."""

from __future__ import annotations

import time
from collections.abc import Iterator
from pathlib import Path
from typing import Any

import httpx
import pytest
from _races_harness import (
    assert_no_lost_update,
    assert_one_decision,
    assert_one_resume,
    flat,
    race,
    scale,
)
from atfg_harness import ServerProcess, WorkerProcess, create_pg_database, drop_pg_database

import pyworkflow
from pyworkflow import hook, step, workflow

#: How often each race runs in ``make test`` (times RELIABILITY_SCALE).
REPEATS = 2
DECISIONS, DECIDING_PROCESSES = 64, 4
RESUMES, RESUMING_PROCESSES = 32, 4
WRITERS, WRITER_PROCESSES, WRITES_EACH = 16, 4, 2


def api(server: ServerProcess, method: str, path: str, body: Any = None) -> httpx.Response:
    return httpx.request(
        method, server.url + "/api/v2" + path, json=body, headers=server.headers(), timeout=30
    )


def pending_approval(server: ServerProcess, key: str) -> tuple[str, str]:
    """A ``tester.pausing`` traverser parked on its approval: (traverser id, approval id)."""
    created = api(server, "POST", "/traversers", {"target": "tester.pausing", "input": {"key": key}})
    assert created.status_code == 201, created.text
    traverser = created.json()["id"]
    deadline = time.monotonic() + 30
    while time.monotonic() < deadline:
        items = api(server, "GET", "/approvals", None).json()["items"]
        mine = [a for a in items if a["traverser_id"] == traverser]
        if mine and api(server, "GET", f"/traversers/{traverser}").json()["status"] == "waiting":
            return traverser, str(mine[0]["id"])
        time.sleep(0.05)
    raise AssertionError(f"{traverser} never parked on its approval")


def decision_specs(servers: list[ServerProcess], approval: str) -> list[dict[str, Any]]:
    """DECISIONS requests in DECIDING_PROCESSES processes (spread over ``servers``), half
    approving and half rejecting, each with its own response."""
    specs = []
    per = DECISIONS // DECIDING_PROCESSES
    for p in range(DECIDING_PROCESSES):
        target = servers[p % len(servers)]
        requests = []
        for j in range(per):
            i = p * per + j
            decision = "approved" if i % 2 == 0 else "rejected"
            requests.append(
                {
                    "method": "POST",
                    "url": f"{target.url}/api/v2/approvals/{approval}/decide",
                    "headers": target.headers(),
                    "json": {"decision": decision, "response": {"racer": i}},
                    "tag": {"racer": {"racer": i}, "decision": decision},
                }
            )
        specs.append({"kind": "http", "requests": requests})
    return specs


def settled(server: ServerProcess, traverser: str, seconds: float = 30) -> dict[str, Any]:
    deadline = time.monotonic() + seconds
    while time.monotonic() < deadline:
        view: dict[str, Any] = api(server, "GET", f"/traversers/{traverser}").json()
        if view["status"] in ("succeeded", "failed", "cancelled"):
            return view
        time.sleep(0.05)
    raise AssertionError(f"{traverser} never finished")


def decide_race(servers: list[ServerProcess], workdir: Path, key: str) -> dict[str, int]:
    first = servers[0]
    traverser, approval = pending_approval(first, key)
    answers = flat(race(decision_specs(servers, approval), workdir))
    winner = api(first, "GET", f"/approvals/{approval}").json()
    assert winner["status"] in ("approved", "rejected"), winner
    counts = assert_one_decision(answers, winner)
    view = settled(first, traverser)
    # resumed once: the continuation is the second attempt and saw the one recorded decision
    assert view["status"] == "succeeded", view
    assert view["attempt"] == 2, view
    assert view["result"]["attempt"] == 2, view
    assert view["result"]["decision"]["status"] == winner["status"], view
    assert view["result"]["decision"]["response"] == winner["response"], view
    assert len(api(first, "GET", "/approvals", None).json()["items"]) == 0  # nothing left pending
    return counts


@pytest.fixture
def worker(server: ServerProcess) -> Iterator[WorkerProcess]:
    proc = WorkerProcess(server, "atfg_agents:app").start()
    yield proc
    proc.kill()


def test_racing_decisions_on_one_approval_accept_exactly_one(
    server: ServerProcess, worker: WorkerProcess, tmp_path: Path
) -> None:
    for n in range(REPEATS * scale()):
        counts = decide_race([server], tmp_path, f"race-{n}")
        assert counts["accepted"] == 1 and sum(counts.values()) == DECISIONS, counts


# -- resume_hook --------------------------------------------------------------------------------

TOKENS: dict[str, str] = {}


def ledger_of(key: str, tmp: Path) -> Path:
    return tmp / f"ledger-{key}.txt"


@step
async def record_payload(ledger: str, payload: Any) -> Any:
    """A side effect outside the store: one line per execution."""
    with open(ledger, "a") as f:
        f.write(f"{payload}\n")
    return payload


@workflow
async def awaits_one_payload(key: str, ledger: str) -> Any:
    async def keep(token: str) -> None:
        TOKENS[key] = token

    payload = await hook("payload", on_created=keep)
    return await record_payload(ledger, payload)


async def test_racing_resume_hook_on_one_token_has_one_winner(engine: str, tmp_path: Path) -> None:
    per = RESUMES // RESUMING_PROCESSES
    for n in range(REPEATS * scale()):
        key = f"resume-{n}"
        ledger = ledger_of(key, tmp_path)
        run_id = await pyworkflow.start(awaits_one_payload, key, str(ledger))
        await pyworkflow.wait_for_run(run_id, 20, until=("suspended",))
        specs = [
            {
                "kind": "resume",
                "storage": engine,
                "token": TOKENS[key],
                "payloads": [{"racer": p * per + j} for j in range(per)],
            }
            for p in range(RESUMING_PROCESSES)
        ]
        won = assert_one_resume(flat(race(specs, tmp_path)))
        assert won["run_id"] == run_id
        run = await pyworkflow.wait_for_run(run_id, 30)
        assert run.status == pyworkflow.RunStatus.COMPLETED, run
        assert run.result == won["payload"]
        assert ledger.read_text().splitlines() == [str(won["payload"])]  # the step ran once
        events = [e.type for e in await pyworkflow.get_workflow_events(run_id)]
        assert events.count("wait_received") == events.count("run_resumed") == 1, events


# -- compare-and-set ------------------------------------------------------------------------------


def leased_traverser(server: ServerProcess) -> tuple[str, int, str]:
    """A traverser on node ``racers`` leased to a worker registered here (no worker process
    runs it): (traverser id, epoch, worker id)."""
    worker = api(server, "POST", "/workers", {"node_id": "racers", "version": "1", "capacity": 1})
    assert worker.status_code == 201, worker.text
    worker_id = worker.json()["id"]
    created = api(server, "POST", "/traversers", {"target": "racers.hold", "input": {}})
    assert created.status_code == 201, created.text
    claimed = api(server, "POST", f"/workers/{worker_id}/claim", {"max": 1, "wait_seconds": 5})
    (task,) = claimed.json()["tasks"]
    return task["traverser"]["id"], int(task["epoch"]), worker_id


def cas_specs(servers: list[ServerProcess], path: str, body: dict[str, Any], params: Any) -> list[Any]:
    per = WRITERS // WRITER_PROCESSES
    return [
        {
            "kind": "cas",
            "url": servers[p % len(servers)].url + "/api/v2" + path,
            "headers": servers[p % len(servers)].headers(),
            "params": params,
            "body": body,
            "writes": WRITES_EACH,
            "writers": [f"w{p * per + j}" for j in range(per)],
        }
        for p in range(WRITER_PROCESSES)
    ]


def cas_races(servers: list[ServerProcess], workdir: Path, n: int) -> int:
    """One checkpoint and one memory key, each raced by WRITERS writers; the conflicts retried."""
    first = servers[0]
    traverser, epoch, worker_id = leased_traverser(first)
    lease = {"epoch": epoch, "worker_id": worker_id}
    conflicts = 0
    for path, body, params in (
        (f"/traversers/{traverser}/checkpoints/progress", lease, lease),
        (f"/memory/races/key-{n}", {}, None),
    ):
        writers = flat(race(cas_specs(servers, path, body, params), workdir))
        final = api(first, "GET", path + (f"?epoch={epoch}&worker_id={worker_id}" if params else "")).json()
        conflicts += assert_no_lost_update(writers, final, WRITERS * WRITES_EACH)
    return conflicts


@pytest.fixture
def long_lease_server(tmp_path: Path) -> Iterator[ServerProcess]:
    """A server whose leases outlast a race (no worker process heartbeats the racers' lease)."""
    proc = ServerProcess(tmp_path)
    proc.env["ATFGRAPH_LEASE_SECONDS"] = "120"
    proc.start()
    yield proc
    proc.close()


def test_compare_and_set_writers_lose_no_update(long_lease_server: ServerProcess, tmp_path: Path) -> None:
    for n in range(REPEATS * scale()):
        cas_races([long_lease_server], tmp_path, n)


# -- two servers, one PostgreSQL ------------------------------------------------------------------


@pytest.fixture
def two_servers(tmp_path: Path) -> Iterator[list[ServerProcess]]:
    """Two graph servers on one new PostgreSQL database (whichever backend the suite runs on)."""
    url = create_pg_database()
    servers = []
    try:
        for name in ("a", "b"):
            (tmp_path / name).mkdir()
            servers.append(ServerProcess(tmp_path / name, db=url))
            servers[-1].env["ATFGRAPH_LEASE_SECONDS"] = "120"
        servers[0].start()
        # the first minted the credentials; the second's users take the first one's
        (tmp_path / "b" / "credentials.json").write_text((tmp_path / "a" / "credentials.json").read_text())
        servers[1].start()
        yield servers
    finally:
        for one in servers:
            one.kill()
        drop_pg_database(url)


def test_races_across_two_servers_sharing_postgresql(
    two_servers: list[ServerProcess], tmp_path: Path
) -> None:
    a, b = two_servers
    worker = WorkerProcess(b, "atfg_agents:app").start()  # claims through b; decisions go to both
    try:
        for n in range(REPEATS * scale()):
            counts = decide_race([a, b], tmp_path, f"two-{n}")
            assert counts["accepted"] == 1, counts
            cas_races([a, b], tmp_path, n)
    finally:
        worker.kill()
