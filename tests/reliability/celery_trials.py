"""Crash-restart trials of the Celery runtime: PostgreSQL, Redis, real ``pyworkflow worker``
processes (the harness of ``tests/integration/celery``, :class:`charness.Cluster`).

A trial is one driver process (:mod:`tests.reliability.driver` with ``--celery``: it starts new
runs and decides every pending hook until all runs ended) with one worker death on the way:
the worker at a named crash point (the points a worker passes, taken in turn; the worker runs
Celery's thread pool, so ``os._exit`` takes the whole worker down), the worker SIGKILLed once
the ledger shows a random amount of work done, or the driver itself at ``after_hook_resumed``
(the payload recorded, the turn message not yet sent). A dead worker is replaced at once; the
oracle checks after every trial, and once more after a last trial without a death.
"""

from __future__ import annotations

import os
import secrets
import shutil
import signal
import subprocess
import sys
import time
from pathlib import Path

from tests.reliability.local_trials import CrashChain, child_env, crash_hit
from tests.reliability.oracle import Figures

from pyworkflow._crashpoints import POINTS

__all__ = ["WORKER_POINTS", "run_celery_campaign"]

CELERY_TESTS = Path(__file__).resolve().parents[1] / "integration" / "celery"
if str(CELERY_TESTS) not in sys.path:
    sys.path.insert(0, str(CELERY_TESTS))

from charness import Cluster  # noqa: E402 - needs CELERY_TESTS on sys.path

#: The crash points a Celery worker passes (a run is created and a hook resumed by clients).
WORKER_POINTS = tuple(p for p in POINTS if p not in ("after_run_created", "after_hook_resumed"))
IMPORT = ("-I", "tests.reliability.workload")
#: A driver that dies between a decision's commit and its publish leaves the run due with no
#: message: the sweeper publishes it after the dispatch grace (30 s by default; 3 here, as the
#: lease is 3 s instead of 30), the recovery a driver trial checks.
GRACE = ("--dispatch-grace", "3")


def _purge(broker: str, queue: str) -> None:
    from pyworkflow.runtime._celery import CeleryOptions, make_app

    app = make_app(CeleryOptions(broker, queue))
    with app.connection_for_write() as conn:
        try:
            conn.default_channel.queue_delete(queue)
        except Exception:  # the queue was never declared
            pass


class _Workers:
    """The campaign's Celery cluster, accounting for every worker that dies."""

    def __init__(self, chain: CrashChain, cluster: Cluster) -> None:
        self.chain = chain
        self.cluster = cluster
        self.accounted: set[int] = set()
        #: workers the harness stopped between trials (idle: not a crash of any run)
        self.retired: set[int] = set()

    def start(self, crash_at: str | None = None) -> subprocess.Popen[bytes]:
        extra = {"PYWORKFLOW_CRASH_AT": crash_at} if crash_at else {}
        return self.cluster.start_worker(concurrency=4, extra_env=extra, args=(*IMPORT, *GRACE))

    def reap(self, killed: set[int]) -> int:
        """Account for dead workers (crash point or kill) and replace them; how many died."""
        died = 0
        for n, proc in enumerate(self.cluster.workers):
            if proc.pid in self.accounted or proc.poll() is None:
                continue
            self.accounted.add(proc.pid)
            if proc.pid in self.retired:
                continue
            died += 1
            log = (self.cluster.workdir / f"worker{n}.log").read_text(errors="replace")
            point = crash_hit(log)
            if proc.returncode == 137 and point:
                self.chain.figures.crash_points[point] += 1
            elif proc.pid in killed:
                self.chain.figures.kills += 1
            else:
                self.chain.figures.violations.append(f"worker{n} exited {proc.returncode}: {log[-1500:]}")
            for key, (_, status) in self.chain.oracle.snapshot().runs.items():
                if status in ("pending", "running"):
                    self.chain.crashes[key] += 1
        if died:
            self.start()
        return died


def _keep_late_trial(cluster: Cluster, driver_err: Path, into: Path) -> None:
    """A trial whose runs made no progress before the driver's timeout (the driver printed each
    unfinished run's queue row, waits and last events): every live worker is asked for its
    threads' stacks (SIGUSR1, registered by the workload module), then the driver's output and
    every worker's log are copied into ``into``, which outlives the campaign's cleanup."""
    for proc in cluster.alive():
        proc.send_signal(signal.SIGUSR1)
    time.sleep(1.0)
    into.mkdir(parents=True, exist_ok=True)
    shutil.copy(driver_err, into / driver_err.name)
    for log in sorted(cluster.workdir.glob("worker*.log")):
        shutil.copy(log, into / log.name)
    print(f"reliability: a late Celery trial's driver output and worker logs are in {into}", file=sys.stderr)


def run_celery_campaign(
    storage: str,
    broker: str,
    workdir: Path,
    trials: int,
    figures: Figures,
    *,
    seed: int = 0,
    runs_per_trial: int = 4,
) -> Figures:
    started = time.monotonic()
    chain = CrashChain(storage, workdir, figures, seed)
    queue = f"reltest-{secrets.token_hex(4)}"
    env = child_env(workdir, chain.ledger, CELERY_BROKER_URL=broker, PWTEST_DIR=str(workdir))
    env["PYTHONPATH"] = os.pathsep.join([str(CELERY_TESTS), env["PYTHONPATH"]])
    cluster = Cluster(storage, broker, queue, workdir, env, lease_ttl=3.0, max_crashes=100_000)
    workers = _Workers(chain, cluster)
    celery = ["--celery", broker, queue]
    try:
        for trial in range(trials + 1):
            last = trial == trials
            mode = "none" if last else ("point", "kill", "point", "driver")[trial % 4]
            point = WORKER_POINTS[(trial // 2) % len(WORKER_POINTS)]
            worker_crash = f"{point}:{chain.rng.randint(1, 3)}" if mode == "point" else None
            if worker_crash:  # a worker that will die at the point; the idle ones go
                for proc in cluster.alive():
                    workers.retired.add(proc.pid)
                    cluster.kill(proc)
                workers.start(worker_crash)
            elif not cluster.alive():
                workers.start()
            keys = "" if last else ",".join(f"c{trial}-{i}" for i in range(runs_per_trial))
            driver_env = dict(env)
            if mode == "driver":
                driver_env["PYWORKFLOW_CRASH_AT"] = f"after_hook_resumed:{chain.rng.randint(1, 4)}"
            driver, err = chain.spawn(["tests.reliability.driver", storage, keys, *celery], driver_env)
            base = len(chain.ledger.entries())
            kill_after = base + chain.rng.randint(1, 10)
            killed: set[int] = set()
            while driver.poll() is None:
                if mode == "kill" and not killed and len(chain.ledger.entries()) >= kill_after:
                    victim = cluster.alive()[0]
                    killed.add(victim.pid)
                    victim.send_signal(signal.SIGKILL)
                    victim.wait(10)
                workers.reap(killed)
                time.sleep(0.05)
            figures.trials += 0 if last else 1
            if driver.returncode == 2:  # runs unfinished in time: keep what tells why
                _keep_late_trial(cluster, err, workdir / f"late-trial-{trial}")
            if driver.returncode != 0:
                text = err.read_text(errors="replace")
                if driver.returncode == 137 and crash_hit(text):
                    figures.crash_points[str(crash_hit(text))] += 1
                else:
                    figures.violations.append(f"driver {err.name} exited {driver.returncode}: {text[-1500:]}")
            workers.reap(killed)
            chain.check(final=last)
    finally:
        cluster.stop_all()
        _purge(broker, queue)
    figures.seconds += time.monotonic() - started
    return figures
