"""The harness of the Celery runtime tests: a :class:`Cluster` is one test's deployment (database,
broker, queue) and the ``pyworkflow worker`` processes it starts, SIGKILLs and replaces."""

from __future__ import annotations

import signal
import subprocess
import sys
import time
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

import psycopg

HERE = Path(__file__).resolve().parent
ROOT = HERE.parents[2]


@dataclass
class Cluster:
    """One test's deployment: database, broker, queue, and the worker processes it runs."""

    storage: str
    broker: str
    queue: str
    workdir: Path
    env: dict[str, str]
    lease_ttl: float = 5.0
    max_crashes: int = 5
    workers: list[subprocess.Popen[bytes]] = field(default_factory=list)

    def start_worker(
        self,
        concurrency: int = 8,
        *,
        extra_env: dict[str, str] | None = None,
        sweeper: bool = True,
        args: tuple[str, ...] = (),
    ) -> subprocess.Popen[bytes]:
        """A ``pyworkflow worker`` (``args``: more of its options)."""
        n = len(self.workers)
        log = open(self.workdir / f"worker{n}.log", "ab")  # noqa: SIM115 - owned by the process
        cmd = [
            sys.executable, "-m", "pyworkflow.cli", "worker",
            "--storage", self.storage, "--broker", self.broker, "--queue", self.queue,
            "-I", "cwf", "--concurrency", str(concurrency), "--lease-ttl", str(self.lease_ttl),
            "--max-crashes", str(self.max_crashes), "--sweep-interval", "0.3", "--loglevel", "WARNING",
            "--hostname", f"w{n}-{self.queue}@localhost",
        ]  # fmt: skip
        if not sweeper:
            cmd.append("--no-sweeper")
        cmd += args
        proc = subprocess.Popen(cmd, env={**self.env, **(extra_env or {})}, stdout=log, stderr=log, cwd=ROOT)
        log.close()
        self.workers.append(proc)
        return proc

    def kill(self, proc: subprocess.Popen[bytes]) -> None:
        proc.send_signal(signal.SIGKILL)
        proc.wait(timeout=10)

    def stop_all(self) -> None:
        for proc in self.workers:
            if proc.poll() is None:
                proc.send_signal(signal.SIGKILL)
        for proc in self.workers:
            proc.wait(timeout=10)

    def alive(self) -> list[subprocess.Popen[bytes]]:
        return [p for p in self.workers if p.poll() is None]

    def logs(self) -> str:
        return "\n".join(
            p.read_text(errors="replace")[-3000:] for p in sorted(self.workdir.glob("worker*.log"))
        )

    # -- reading the database directly (the oracle) ---------------------------------------------

    def sql(self, query: str, params: Any = None) -> list[tuple[Any, ...]]:
        with psycopg.connect(self.storage) as conn:
            return conn.execute(query, params).fetchall()

    def statuses(self) -> dict[str, int]:
        return {s: n for s, n in self.sql("SELECT status, count(*) FROM runs GROUP BY status")}

    def wait_for(self, what: str, predicate: Any, timeout: float) -> None:
        deadline = time.monotonic() + timeout
        while time.monotonic() < deadline:
            if predicate():
                return
            time.sleep(0.1)
        raise AssertionError(
            f"timed out after {timeout} s waiting for {what}; runs: {self.statuses()}\n{self.logs()}"
        )

    def wait_statuses(self, status: str, count: int, timeout: float) -> None:
        self.wait_for(f"{count} runs {status}", lambda: self.statuses().get(status, 0) >= count, timeout)

    def steps_completed_twice(self) -> list[tuple[Any, ...]]:
        return self.sql(
            "SELECT run_id, key, count(*) FROM events WHERE type = 'step_completed'"
            " GROUP BY run_id, key HAVING count(*) > 1"
        )
