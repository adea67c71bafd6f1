"""Crash-restart trials of the pyworkflow local runtime (SQLite or PostgreSQL).

A campaign is a chain of driver processes (:mod:`tests.reliability.driver`) on one database and
one ledger. Each process is a trial: it starts a few new runs, serves and decides every run in
the database, and dies on the way, at a named crash point (``PYWORKFLOW_CRASH_AT=point:N``, the
points taken in turn so that every one is hit) or by SIGKILL after a random delay. The next
process recovers what the dead one left. After every trial the oracle checks the invariants
that hold at any moment; a last process without a crash finishes everything and the oracle
checks that no run was lost. Many runs per process start keep a trial cheap.
"""

from __future__ import annotations

import os
import random
import signal
import subprocess
import sys
import time
from collections import Counter
from pathlib import Path

from tests.reliability import workload
from tests.reliability.ledger import Ledger
from tests.reliability.oracle import Expect, Figures, Oracle

from pyworkflow._crashpoints import POINTS

__all__ = ["EXPECT", "CrashChain", "run_local_campaign"]

REPO = Path(__file__).resolve().parents[2]
EXPECT = Expect(effects=workload.EFFECTS, required=workload.REQUIRED)
#: The statuses in which a killed process may have been running a run's code.
IN_FLIGHT = ("pending", "running")


def child_env(workdir: Path, ledger: Ledger, **extra: str) -> dict[str, str]:
    """The environment of a trial's processes: the repository importable, the ledger named, no
    crash point or store choice inherited from the caller."""
    env = {k: v for k, v in os.environ.items() if not k.startswith("PYWORKFLOW_")}
    env.update(
        PYTHONPATH=os.pathsep.join([str(REPO), str(REPO / "src")]),
        PYWORKFLOW_HOME=str(workdir / "home"),
        RELIABILITY_LEDGER=str(ledger.path),
        **extra,
    )
    return env


def crash_hit(stderr: str) -> str | None:
    """The crash point a process reported reaching (``pyworkflow._crashpoints``), if any."""
    marker = "crash point '"
    at = stderr.rfind(marker)
    return stderr[at + len(marker) :].split("'", 1)[0] if at >= 0 else None


class CrashChain:
    """One campaign's database, ledger, crash counts and figures."""

    def __init__(
        self, storage: str, workdir: Path, figures: Figures, seed: int, expect: Expect = EXPECT
    ) -> None:
        self.storage = storage
        self.expect = expect
        self.workdir = workdir
        self.ledger = Ledger(workdir / "ledger.jsonl")
        self.oracle = Oracle(storage)
        self.figures = figures
        self.crashes: Counter[str] = Counter()
        self.rng = random.Random(seed)
        self.spawned = 0

    def spawn(self, args: list[str], env: dict[str, str]) -> tuple[subprocess.Popen[bytes], Path]:
        self.spawned += 1
        err = self.workdir / f"p{self.spawned}.err"
        with open(err, "wb") as log:
            proc = subprocess.Popen(
                [sys.executable, "-m", *args], cwd=REPO, env=env, stdout=log, stderr=subprocess.STDOUT
            )
        return proc, err

    def died(self, proc: subprocess.Popen[bytes], err: Path, killed: bool) -> bool:
        """Account for how a trial's process ended; True when it died (a crash point or a kill)."""
        rc = proc.returncode
        text = err.read_text(errors="replace")
        point = crash_hit(text)
        if rc == 137 and point:
            self.figures.crash_points[point] += 1
        elif rc == -signal.SIGKILL and killed:
            self.figures.kills += 1
        elif rc != 0:
            self.figures.violations.append(f"process {err.name} exited {rc}: {text[-1500:]}")
            return False
        else:
            return False
        snap = self.oracle.snapshot()
        for key, (_, status) in snap.runs.items():
            # a run the process was running, or whose suspended turn's lease it still held
            if status in IN_FLIGHT or key in snap.leased:
                self.crashes[key] += 1
        return True

    def check(self, final: bool = False) -> None:
        bad, snap = self.oracle.check(self.ledger, self.expect, crashes=self.crashes, final=final)
        self.figures.violations += bad
        if final:
            self.figures.runs += len(snap.runs)
            self.figures.add_reexecutions(self.ledger, self.expect.effects)

    def crash_spec(self, trial: int) -> str | None:
        """Every other trial a named crash point (taken in turn), the others a random SIGKILL."""
        if trial % 2:
            return None
        point = POINTS[(trial // 2) % len(POINTS)]
        return f"{point}:{self.rng.randint(1, 3)}"


def run_local_campaign(
    storage: str, workdir: Path, trials: int, figures: Figures, *, seed: int = 0, runs_per_trial: int = 4
) -> Figures:
    """``trials`` processes of the local runtime on ``storage``, each killed on the way."""
    started = time.monotonic()
    chain = CrashChain(storage, workdir, figures, seed)
    for trial in range(trials):
        keys = ",".join(f"t{trial}-{i}" for i in range(runs_per_trial))
        spec = chain.crash_spec(trial)
        extra = {"PYWORKFLOW_CRASH_AT": spec} if spec else {}
        proc, err = chain.spawn(
            ["tests.reliability.driver", storage, keys], child_env(workdir, chain.ledger, **extra)
        )
        killed = False
        if spec is None:
            try:
                proc.wait(chain.rng.uniform(0.2, 1.4))
            except subprocess.TimeoutExpired:
                proc.send_signal(signal.SIGKILL)
                killed = True
        proc.wait(180)
        figures.trials += 1
        chain.died(proc, err, killed)
        chain.check()
    proc, err = chain.spawn(["tests.reliability.driver", storage, ""], child_env(workdir, chain.ledger))
    if proc.wait(180) != 0:
        figures.violations.append(f"the last process exited {proc.returncode}: {err.read_text()[-1500:]}")
    chain.check(final=True)
    figures.seconds += time.monotonic() - started
    return figures
