"""Crash-restart trials of the graph server with workers (SQLite or PostgreSQL): real
``python -m atfgraph.server`` and ``python -m atfgraph.worker`` processes (the acceptance
harness, ``atfg_harness``), SIGKILLed at random points of the work.

A trial submits a few traversers of :func:`tests.reliability.agents.trial`, waits until the
ledger shows a random amount of new work (1 to 12 lines: mid-handler, mid-step, around a pause)
and SIGKILLs the worker (three trials in four) or the server, then starts it again. A reviewer
task in this process decides every pending approval all along (a ``"decide"`` line per answer,
with the recorded ``decided_at``). The graph server has no named crash points (those are the
engine's, passed by pyworkflow's runtimes), so its trials are random kills. The oracle checks
after every trial, and at the end that every traverser succeeded.
"""

from __future__ import annotations

import asyncio
import os
import sys
import time
from pathlib import Path
from typing import Any

from tests.reliability import agents
from tests.reliability.local_trials import REPO, CrashChain
from tests.reliability.oracle import Expect, Figures

from atfgraph import Client, ConflictError, ServerUnavailableError

__all__ = ["EXPECT", "GraphDeployment", "run_graph_campaign"]

ACCEPTANCE = REPO / "tests" / "acceptance" / "atfgraph"
if str(ACCEPTANCE) not in sys.path:
    sys.path.insert(0, str(ACCEPTANCE))

from atfg_harness import ServerProcess, WorkerProcess, _ready, wait_until  # noqa: E402 - needs ACCEPTANCE

#: How long a (re)started server may take to answer /readyz on a machine loaded by others.
READY_SECONDS = 90.0

EXPECT = Expect(effects=agents.EFFECTS, required=agents.REQUIRED, lost_attempts_are_crashes=True)
MODULE = "tests.reliability.agents:app"


class GraphDeployment:
    """One server (restartable) on ``db`` and its workers, every process writing ``ledger``."""

    def __init__(self, home: Path, db: str, ledger_path: Path) -> None:
        self.server = ServerProcess(home, db=db)
        self.server.env["RELIABILITY_LEDGER"] = str(ledger_path)
        self.server.env["PYTHONPATH"] = os.pathsep.join([str(REPO), str(REPO / "src")])
        self.workers: list[WorkerProcess] = []

    def start_server(self) -> None:
        try:
            self.server.start()
        except AssertionError:  # not ready within the harness's wait: a loaded machine
            proc = self.server.proc
            if proc is None or proc.poll() is not None:
                raise  # the harness gave up on it (and killed it)
            url = self.server.url
            wait_until(lambda: _ready(url), READY_SECONDS, f"server on {url} never became ready")

    def start_worker(self, *args: str) -> WorkerProcess:
        worker = WorkerProcess(self.server, MODULE, *args)
        before = len(self.server.workers())
        worker.start(wait_registered=False)
        self.workers.append(worker)
        wait_until(
            lambda: len(self.server.workers()) > before,
            READY_SECONDS,
            f"worker never registered: {worker.log}",
        )
        return worker

    def close(self) -> None:
        for worker in self.workers:
            worker.kill()
        self.server.kill()


async def decide_all(client: Client, chain: CrashChain) -> int:
    """Approve every pending approval once; a ``"decide"`` ledger line per answer."""
    decided = 0
    for approval in await client.list_approvals(limit=1000):
        try:
            answer = await client.decide_approval(str(approval["id"]), "approved")
            outcome = "accepted"
        except ConflictError as exc:
            answer, outcome = {}, type(exc).__name__
        chain.ledger.record(
            str(approval["traverser_id"]),
            "decide",
            wait=str(approval["id"]),
            outcome=outcome,
            decided_at=answer.get("decided_at"),
        )
        decided += 1
    return decided


async def _reviewer(client: Client, chain: CrashChain, stop: asyncio.Event) -> None:
    while not stop.is_set():
        try:
            await decide_all(client, chain)
        except (ServerUnavailableError, OSError):
            pass  # the server is being killed and restarted
        await asyncio.sleep(0.1)


async def _until(predicate: Any, seconds: float) -> bool:
    deadline = time.monotonic() + seconds
    while time.monotonic() < deadline:
        if predicate():
            return True
        await asyncio.sleep(0.05)
    return False


async def run_graph_campaign(
    db: str, workdir: Path, trials: int, figures: Figures, *, seed: int = 0, runs_per_trial: int = 4
) -> Figures:
    """``trials`` random SIGKILLs of a worker or the server on ``db`` (a file or a URL)."""
    started = time.monotonic()
    storage = db if db.startswith("postgresql://") else f"sqlite:///{db}"
    chain = CrashChain(storage, workdir, figures, seed, EXPECT)
    deploy = GraphDeployment(workdir, db, chain.ledger.path)
    stop = asyncio.Event()
    reviewer: asyncio.Task[None] | None = None
    try:
        await asyncio.to_thread(deploy.start_server)
        await asyncio.to_thread(deploy.start_worker)
        async with Client(deploy.server.url, token=deploy.server.token()) as client:
            reviewer = asyncio.create_task(_reviewer(client, chain, stop))
            for trial in range(trials):
                for i in range(runs_per_trial):
                    handle = await client.submit("reliab.trial", {"n": i}, max_attempts=1000)
                    chain.ledger.record(handle.id, "started", trial=trial)
                target = len(chain.ledger.entries()) + chain.rng.randint(1, 12)
                if not await _until(lambda t=target: len(chain.ledger.entries()) >= t, 90):
                    figures.violations.append(f"trial {trial}: no progress in 90 s")
                kill_server = trial % 4 == 3
                victim = deploy.server if kill_server else deploy.workers[-1]
                await asyncio.to_thread(victim.kill)
                figures.kills += 1
                figures.trials += 1
                in_flight = []
                for key, (_, status) in chain.oracle.snapshot().runs.items():
                    if status in ("pending", "running"):
                        chain.crashes[key] += 1
                        in_flight.append(key)
                chain.ledger.record("-", "kill", trial=trial, server=kill_server, in_flight=in_flight)
                if kill_server:
                    await asyncio.to_thread(deploy.start_server)
                else:
                    deploy.workers.pop()
                    await asyncio.to_thread(deploy.start_worker)
                chain.check()
            if not await _until(lambda: chain.oracle.unfinished() == 0, 120):
                figures.violations.append(f"{chain.oracle.unfinished()} traversers unfinished after 120 s")
    finally:
        stop.set()
        if reviewer is not None:
            await asyncio.gather(reviewer, return_exceptions=True)
        await asyncio.to_thread(deploy.close)
    chain.check(final=True)
    figures.seconds += time.monotonic() - started
    return figures
