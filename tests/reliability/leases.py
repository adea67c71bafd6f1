"""Lease trials (issue 11 B.3): a worker frozen with SIGSTOP past its lease, then SIGCONT.

Graph server: worker A holds ``reliab.held`` attempts and is stopped mid-handler; worker B must
get the re-dispatched attempts (not A's still-open long poll, issue 11 A.4) and finish them; A,
continued, must not write under the lease it lost (its checkpoint write is refused, so it leaves
no ``checkpoint`` ledger line) and must get work again. Celery: worker A is stopped mid-step
past ``--lease-ttl``; worker B recovers the run; A, continued, must not record the step a second
time. The oracle checks after each trial.
"""

from __future__ import annotations

import asyncio
import os
import secrets
import signal
import time
from pathlib import Path

from tests.reliability import workload
from tests.reliability.celery_trials import CELERY_TESTS, IMPORT, Cluster, _purge
from tests.reliability.graph_trials import GraphDeployment
from tests.reliability.ledger import Ledger
from tests.reliability.local_trials import child_env
from tests.reliability.oracle import Expect, Figures, Oracle

import pyworkflow
from atfgraph import Client

__all__ = ["celery_lease_trials", "graph_lease_trials"]

HELD = Expect(effects=("finish",), required=("finish",))


async def _until(predicate: object, seconds: float, what: str) -> None:
    deadline = time.monotonic() + seconds
    while not predicate():  # type: ignore[operator]
        if time.monotonic() > deadline:
            raise AssertionError(f"timed out after {seconds} s waiting for {what}")
        await asyncio.sleep(0.05)


async def graph_lease_trials(db: str, workdir: Path, trials: int, figures: Figures) -> Figures:
    """``trials`` freezes of a graph worker holding two attempts, each past the 1.5 s lease."""
    started = time.monotonic()
    storage = db if db.startswith("postgresql://") else f"sqlite:///{db}"
    ledger, oracle = Ledger(workdir / "ledger.jsonl"), Oracle(storage)
    deploy = GraphDeployment(workdir, db, ledger.path)
    crashes: dict[str, int] = {}
    try:
        await asyncio.to_thread(deploy.start_server)
        async with Client(deploy.server.url, token=deploy.server.token()) as client:
            frozen = await asyncio.to_thread(deploy.start_worker, "--capacity", "2")
            assert frozen.proc is not None
            for trial in range(trials):
                held = [
                    await client.submit("reliab.held", {"seconds": 4.0}, max_attempts=2) for _ in range(2)
                ]
                ids = {h.id for h in held}
                await _until(
                    lambda ids=ids: {e.run for e in ledger.entries() if e.what == "attempt"} >= ids,
                    30,
                    "attempt 1",
                )
                frozen.proc.send_signal(signal.SIGSTOP)
                other = await asyncio.to_thread(deploy.start_worker)
                try:
                    for handle in held:  # lost once to A (charged), then run by B
                        assert await handle.result(timeout=40) == {"attempt": 2}, handle.id
                        crashes[handle.id] = 1
                finally:
                    frozen.proc.send_signal(signal.SIGCONT)
                await asyncio.sleep(5.0)  # A's handlers wake up and try to write under lost leases
                await asyncio.to_thread(other.kill)
                deploy.workers.remove(other)
                stale = [
                    e
                    for e in ledger.entries()
                    if e.pid == frozen.proc.pid and e.run in ids and e.what != "attempt"
                ]
                if stale:
                    figures.violations.append(f"trial {trial}: the frozen worker wrote {stale}")
                # A answers again and gets work again, one attempt each.
                after = await client.submit("reliab.held", {"seconds": 0}, max_attempts=1)
                if await after.result(timeout=30) != {"attempt": 1}:
                    figures.violations.append(f"trial {trial}: the continued worker did not take new work")
                crashes[after.id] = 0
                figures.trials += 1
                figures.kills += 1
                bad, snap = oracle.check(ledger, HELD, crashes=crashes, final=True)
                figures.violations += bad
                figures.runs = len(snap.runs)
                for run_id in ids:
                    if snap.checkpoints.get((run_id, "progress")) != 1:
                        figures.violations.append(
                            f"{run_id}: checkpoint at {snap.checkpoints.get((run_id, 'progress'))}"
                        )
    finally:
        await asyncio.to_thread(deploy.close)
    figures.seconds += time.monotonic() - started
    return figures


CELERY_HELD = Expect(effects=("hold",), required=("hold",))


async def celery_lease_trials(
    storage: str, broker: str, workdir: Path, trials: int, figures: Figures
) -> Figures:
    """``trials`` freezes of a ``pyworkflow worker`` mid-step, past its 1.5 s turn lease."""
    started = time.monotonic()
    ledger, oracle = Ledger(workdir / "ledger.jsonl"), Oracle(storage)
    queue = f"reltest-{secrets.token_hex(4)}"
    env = child_env(workdir, ledger, CELERY_BROKER_URL=broker, PWTEST_DIR=str(workdir))
    env["PYTHONPATH"] = os.pathsep.join([str(CELERY_TESTS), env["PYTHONPATH"]])
    cluster = Cluster(storage, broker, queue, workdir, env, lease_ttl=1.5, max_crashes=100)
    pyworkflow.configure(storage=storage, runtime="celery", broker=broker, queue=queue)
    crashes: dict[str, int] = {}
    try:
        for trial in range(trials):
            frozen = cluster.start_worker(concurrency=2, args=IMPORT)
            key = f"held-{trial}"
            run_id = await pyworkflow.start(workload.held, key, 4.0)
            ledger.record(key, "started", run_id=run_id)
            await _until(lambda k=key: ledger.counts("hold")[k] >= 1, 60, "the step to start")
            frozen.send_signal(signal.SIGSTOP)
            crashes[key] = 1
            other = cluster.start_worker(concurrency=2, args=IMPORT)
            try:
                run = await pyworkflow.wait_for_run(run_id, 60)
            finally:
                frozen.send_signal(signal.SIGCONT)
            if run.status != "completed":
                figures.violations.append(f"{key} ended {run.status}: {run.error}")
            await asyncio.sleep(5.0)  # A's step returns and tries to record its result
            figures.trials += 1
            figures.kills += 1
            figures.add_reexecutions(ledger, CELERY_HELD.effects)
            bad, snap = oracle.check(ledger, CELERY_HELD, crashes=crashes, final=True)
            figures.violations += bad
            figures.runs = len(snap.runs)
            recovered = oracle.query("SELECT count(*) FROM events WHERE type = 'run_recovered'")[0][0]
            if recovered < trial + 1:
                figures.violations.append(f"trial {trial}: the frozen turn was not taken over ({recovered})")
            for proc in (frozen, other):
                cluster.kill(proc)
    finally:
        await pyworkflow.shutdown()
        cluster.stop_all()
        _purge(broker, queue)
    figures.seconds += time.monotonic() - started
    return figures
