"""Crash-restart trials of the graph server with workers (SQLite or PostgreSQL): real
``python -m atfgraph.server`` and ``python -m atfgraph.worker`` processes (the acceptance
harness, ``atfg_harness``), the server killed at its named crash points and either process
SIGKILLed at random points of the work.

A trial submits a few traversers of :func:`tests.reliability.agents.trial` (each with an
idempotency key, submitted again until the server answers). Six trials in ten are crash-point
trials: the server runs with ``PYWORKFLOW_CRASH_AT=<point>:<N>`` (the points of
``pyworkflow._crashpoints.SERVER_POINTS`` in turn, N from 1 to 3), the trial waits for it to
exit by itself at that point and starts it again, with the next trial's point when that is a
crash-point trial (so no extra kill is needed), else without the variable. For
``server_after_sweep`` the trial's traversers ask for approvals with a deadline, which the
reviewer leaves to expire, so that the sweeper has work. The other trials wait until the ledger
shows a random amount of new work (1 to 12 lines: mid-handler, mid-step, around a pause) and
SIGKILL the worker (three in four) or the server, then start it again. A reviewer task in this
process decides every pending approval without a deadline all along (a ``"decide"`` line per
answer, with the recorded ``decided_at``), and sends a decision the server did not answer
again. The oracle checks after every trial, and at the end that every traverser succeeded.
"""

from __future__ import annotations

import asyncio
import os
import subprocess
import sys
import time
from pathlib import Path
from typing import Any

from tests.reliability import agents
from tests.reliability.local_trials import REPO, CrashChain
from tests.reliability.oracle import Expect, Figures

from atfgraph import Client, ConflictError, ServerUnavailableError
from pyworkflow._crashpoints import SERVER_POINTS

__all__ = ["EXPECT", "GraphDeployment", "run_graph_campaign", "trial_plan"]

ACCEPTANCE = REPO / "tests" / "acceptance" / "atfgraph"
if str(ACCEPTANCE) not in sys.path:
    sys.path.insert(0, str(ACCEPTANCE))

from atfg_harness import ServerProcess, WorkerProcess, _ready, wait_until  # noqa: E402 - needs ACCEPTANCE

#: How long a (re)started server may take to answer /readyz on a machine loaded by others.
READY_SECONDS = 90.0

EXPECT = Expect(effects=agents.EFFECTS, required=agents.REQUIRED, lost_attempts_are_crashes=True)
MODULE = "tests.reliability.agents:app"
CRASH_AT = "PYWORKFLOW_CRASH_AT"
#: How long a crash-point trial waits for the server to reach its point.
CRASH_SECONDS = 60.0
#: The deadlines of a sweep trial's approvals: the first after this many seconds, the others
#: that much later each (one expiry per sweep pass).
EXPIRES_SECONDS = 0.2


class GraphDeployment:
    """One server (restartable) on ``db`` and its workers, every process writing ``ledger``."""

    def __init__(self, home: Path, db: str, ledger_path: Path) -> None:
        self.home = home
        self.server = ServerProcess(home, db=db)
        self.server.env["RELIABILITY_LEDGER"] = str(ledger_path)
        self.server.env["PYTHONPATH"] = os.pathsep.join([str(REPO), str(REPO / "src")])
        self.server.env.pop(CRASH_AT, None)  # the workers inherit it: none from the caller
        self.workers: list[WorkerProcess] = []
        #: the crash point the running server was started with
        self.crash_at: str | None = None
        self.starts = 0

    def start_server(self, crash_at: str | None = None) -> None:
        """Start the server (again), with ``PYWORKFLOW_CRASH_AT=crash_at`` when given, each
        process with its own log (``server.log`` names the last). Returns once it is ready, or
        once it has exited if it was to crash (it may reach its point while starting)."""
        server = self.server
        self.starts += 1
        self.crash_at = crash_at
        server.log = self.home / f"server-{self.starts}.log"
        env = {**server.env, **({CRASH_AT: crash_at} if crash_at else {})}
        with open(server.log, "ab") as log:
            server.proc = subprocess.Popen(
                [sys.executable, "-m", "atfgraph.server", "--port", str(server.port), "--db", server.db,
                 *server.args],
                cwd=REPO, env=env, stdout=log, stderr=subprocess.STDOUT,
            )  # fmt: skip
        proc, url = server.proc, server.url
        wait_until(
            lambda: proc.poll() is not None or _ready(url),
            READY_SECONDS,
            f"server on {url} never became ready; see {server.log}",
        )
        if proc.poll() is not None and crash_at is None:
            raise AssertionError(f"server on {url} exited {proc.returncode}; see {server.log}")

    def server_alive(self) -> bool:
        return self.server.proc is not None and self.server.proc.poll() is None

    def start_worker(self, *args: str) -> WorkerProcess:
        worker = WorkerProcess(self.server, MODULE, *args)
        before = self.server.worker_ids()
        worker.start(wait_registered=False)
        self.workers.append(worker)
        self.server.wait_for_new_worker(before, READY_SECONDS, f"worker never registered: {worker.log}")
        return worker

    def close(self) -> None:
        for worker in self.workers:
            worker.kill()
        self.server.kill()


async def decide_all(client: Client, chain: CrashChain, unanswered: dict[str, str] | None = None) -> int:
    """Approve every pending approval without a deadline once; a ``"decide"`` ledger line per
    answer. ``unanswered`` (approval id -> traverser id): the decisions the server did not
    answer (it died, perhaps after committing), sent again first, as a client would: the same
    decision again must answer the one recorded, never make a second."""
    unanswered = {} if unanswered is None else unanswered
    todo = list(unanswered.items())
    for approval in await client.list_approvals(limit=1000):
        if approval.get("expires_at") is None and str(approval["id"]) not in unanswered:
            todo.append((str(approval["id"]), str(approval["traverser_id"])))
        # (one with a deadline is a sweep trial's: left to expire)
    decided = 0
    for approval_id, traverser_id in todo:
        again = approval_id in unanswered
        unanswered[approval_id] = traverser_id  # until the server answers
        try:
            answer = await client.decide_approval(approval_id, "approved")
            outcome = "accepted"
        except ConflictError as exc:
            answer, outcome = {}, type(exc).__name__
        del unanswered[approval_id]
        chain.ledger.record(
            traverser_id,
            "decide",
            wait=approval_id,
            outcome=outcome,
            decided_at=answer.get("decided_at"),
            again=again,
        )
        decided += 1
    return decided


async def _reviewer(client: Client, chain: CrashChain, stop: asyncio.Event) -> None:
    unanswered: dict[str, str] = {}
    while not stop.is_set():
        try:
            await decide_all(client, chain, unanswered)
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


def trial_plan(trial: int) -> str:
    """What kills trial ``trial``'s process: ``"point"`` (six in ten: the server at its next
    crash point), else a random SIGKILL of the ``"server"`` (one in ten) or the ``"worker"``."""
    slot = trial % 10
    if slot < 6:
        return "point"
    return "server" if slot == 9 else "worker"


def _crash_specs(trials: int, chain: CrashChain) -> list[str | None]:
    """The ``PYWORKFLOW_CRASH_AT`` of each trial (None: a random kill), the points in turn."""
    specs: list[str | None] = []
    points = 0
    for trial in range(trials):
        if trial_plan(trial) == "point":
            point = SERVER_POINTS[points % len(SERVER_POINTS)]
            specs.append(f"{point}:{chain.rng.randint(1, 3)}")
            points += 1
        else:
            specs.append(None)
    return specs


async def _submit(
    client: Client, chain: CrashChain, trial: int, unanswered: dict[str, dict[str, Any]]
) -> bool:
    """Submit each traverser of ``unanswered`` (idempotency key -> input) the server has not
    answered for yet, dropping it from there once answered (a ``"started"`` line); stops at the
    first the server does not answer. True when none is left."""
    for key, inputs in list(unanswered.items()):
        try:
            handle = await client.submit("reliab.trial", inputs, max_attempts=1000, idempotency_key=key)
        except ServerUnavailableError:
            return False
        chain.ledger.record(handle.id, "started", trial=trial, key=key)
        del unanswered[key]
    return True


async def _submit_all(
    client: Client, chain: CrashChain, trial: int, unanswered: dict[str, dict[str, Any]]
) -> None:
    """:func:`_submit` until the server answered for every one (the server runs with no crash
    point: it may only be slow to answer)."""
    deadline = time.monotonic() + READY_SECONDS
    while not await _submit(client, chain, trial, unanswered):
        if time.monotonic() > deadline:
            chain.figures.violations.append(f"trial {trial}: submissions unanswered: {sorted(unanswered)}")
            return
        await asyncio.sleep(0.1)


async def run_graph_campaign(
    db: str, workdir: Path, trials: int, figures: Figures, *, seed: int = 0, runs_per_trial: int = 4
) -> Figures:
    """``trials`` deaths on ``db`` (a file or a URL): the server at its crash points, or a
    random SIGKILL of a worker or the server (:func:`trial_plan`)."""
    started = time.monotonic()
    storage = db if db.startswith("postgresql://") else f"sqlite:///{db}"
    chain = CrashChain(storage, workdir, figures, seed, EXPECT)
    deploy = GraphDeployment(workdir, db, chain.ledger.path)
    specs = [*_crash_specs(trials, chain), None]  # the last restart crashes nowhere
    stop = asyncio.Event()
    reviewer: asyncio.Task[None] | None = None
    #: submissions not answered yet (idempotency key -> input): submitted again until they are
    unanswered: dict[str, dict[str, Any]] = {}

    def server_died(killed: bool) -> None:
        """Account for the server's death: its crash point or kill, the runs it had in flight."""
        proc = deploy.server.proc
        assert proc is not None
        chain.died(proc, deploy.server.log, killed)

    try:
        await asyncio.to_thread(deploy.start_server, specs[0])
        await asyncio.to_thread(deploy.start_worker)
        async with Client(deploy.server.url, token=deploy.server.token()) as client:
            reviewer = asyncio.create_task(_reviewer(client, chain, stop))
            for trial in range(trials):
                spec = specs[trial]
                if spec is not None and deploy.crash_at != spec:
                    # Not started for this trial's point (a worker was killed last): kill it now.
                    await asyncio.to_thread(deploy.server.kill)
                    server_died(killed=True)
                    await asyncio.to_thread(deploy.start_server, spec)
                sweep = spec is not None and spec.startswith("server_after_sweep:")
                unanswered.update(
                    (f"t{trial}-{i}", {"n": i, **({"expires": EXPIRES_SECONDS * (i + 1)} if sweep else {})})
                    for i in range(runs_per_trial)
                )
                if spec is not None:
                    await _submit(client, chain, trial, unanswered)
                    if await _until(lambda: not deploy.server_alive(), CRASH_SECONDS):
                        server_died(killed=False)
                    else:  # its point not reached in time: counted as a kill, not a crash point
                        chain.ledger.record("-", "missed", trial=trial, spec=spec)
                        await asyncio.to_thread(deploy.server.kill)
                        server_died(killed=True)
                    chain.ledger.record("-", "crash", trial=trial, spec=spec)
                    await asyncio.to_thread(deploy.start_server, specs[trial + 1])
                    # A server armed for the next trial may die before it answers: what it did
                    # not answer is submitted again in the next trial.
                    await _submit(client, chain, trial, unanswered)
                    figures.trials += 1
                    chain.check()
                    continue
                await _submit_all(client, chain, trial, unanswered)
                target = len(chain.ledger.entries()) + chain.rng.randint(1, 12)
                if not await _until(lambda t=target: len(chain.ledger.entries()) >= t, 90):
                    figures.violations.append(f"trial {trial}: no progress in 90 s")
                kill_server = trial_plan(trial) == "server"
                figures.trials += 1
                if kill_server:
                    await asyncio.to_thread(deploy.server.kill)
                    server_died(killed=True)
                    chain.ledger.record("-", "kill", trial=trial, server=True)
                    await asyncio.to_thread(deploy.start_server, specs[trial + 1])
                else:
                    await asyncio.to_thread(deploy.workers[-1].kill)
                    figures.kills += 1
                    in_flight = []
                    for key, (_, status) in chain.oracle.snapshot().runs.items():
                        if status in ("pending", "running"):
                            chain.crashes[key] += 1
                            in_flight.append(key)
                    chain.ledger.record("-", "kill", trial=trial, server=False, in_flight=in_flight)
                    deploy.workers.pop()
                    await asyncio.to_thread(deploy.start_worker)
                chain.check()
            if deploy.crash_at is not None:  # the last trial's point still armed: disarm it
                await asyncio.to_thread(deploy.server.kill)
                server_died(killed=True)
                await asyncio.to_thread(deploy.start_server)
            await _submit_all(client, chain, trials, unanswered)
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
