"""The soak (issue 11 B.6): ``python -m tests.reliability.soak --minutes 10 --runs 10000``.

A graph server (SQLite or PostgreSQL) and two workers park ``--runs`` traversers on approvals
(a tenth of them with an expiry spread over the soak: the timers), then for ``--minutes`` a
reviewer decides a steady trickle of them (``--rate`` per second) while a worker is SIGKILLed
and replaced every ``--kill-every`` seconds. Every ``--sample-every`` seconds it samples each
process's resident memory, open file descriptors and database connections (PostgreSQL:
``pg_stat_activity``; SQLite: descriptors open on the database and its WAL). It reports the
decision latency (decide answered -> the traverser seen succeeded: p50, p99, max) and asserts
that the server's memory, descriptors and connections are flat after warm-up (the first third
of the samples): the medians of the last third within 25 % (and 30 MB) of memory, 10
descriptors and 4 connections of the middle third's.
The oracle checks the database and ledger at the end. Exit status 1 on any failure.
"""

from __future__ import annotations

import argparse
import asyncio
import json
import os
import random
import statistics
import sys
import tempfile
import time
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

from tests.reliability.campaigns import _create_pg, _drop_pg
from tests.reliability.graph_trials import GraphDeployment
from tests.reliability.ledger import Ledger
from tests.reliability.oracle import Expect, Oracle

from atfgraph import Client, ConflictError, ServerUnavailableError

__all__ = ["SoakReport", "main", "make_parser", "soak"]

#: A decided or expired parked run finishes once, whatever the kills (recorded by the
#: continuation, which a kill may repeat).
EXPECT = Expect(effects=(), end=frozenset({"completed", "suspended"}))


@dataclass
class SoakReport:
    backend: str
    runs: int
    seconds: float
    decisions: int = 0
    expired: int = 0
    kills: int = 0
    latencies: list[float] = field(default_factory=list)
    samples: list[dict[str, Any]] = field(default_factory=list)
    failures: list[str] = field(default_factory=list)

    def percentile(self, q: float) -> float:
        if not self.latencies:
            return float("nan")
        ordered = sorted(self.latencies)
        return ordered[min(len(ordered) - 1, int(q * len(ordered)))]

    def summary(self) -> dict[str, Any]:
        server = [s for s in self.samples if s["process"] == "server"]
        return {
            "backend": self.backend,
            "parked runs": self.runs,
            "soak seconds": round(self.seconds),
            "decisions": self.decisions,
            "timers expired": self.expired,
            "worker kills": self.kills,
            "latency p50 s": round(self.percentile(0.5), 3),
            "latency p99 s": round(self.percentile(0.99), 3),
            "latency max s": round(max(self.latencies, default=float("nan")), 3),
            "server rss MB first/last": [round(server[0]["rss_mb"], 1), round(server[-1]["rss_mb"], 1)]
            if server
            else None,
            "server fds first/last": [server[0]["fds"], server[-1]["fds"]] if server else None,
            "db connections first/last": [server[0]["db_conns"], server[-1]["db_conns"]] if server else None,
            "failures": self.failures,
        }


def _proc_stats(pid: int) -> tuple[float, int, int]:
    """Resident MB, open descriptors, and descriptors on a SQLite database file, of ``pid``."""
    rss = 0.0
    for line in Path(f"/proc/{pid}/status").read_text().splitlines():
        if line.startswith("VmRSS:"):
            rss = int(line.split()[1]) / 1024
    fds = os.listdir(f"/proc/{pid}/fd")
    on_db = 0
    for fd in fds:
        try:
            target = os.readlink(f"/proc/{pid}/fd/{fd}")
        except OSError:
            continue
        on_db += target.endswith((".db", ".db-wal"))
    return rss, len(fds), on_db


def _sample(deploy: GraphDeployment, oracle: Oracle, at: float) -> list[dict[str, Any]]:
    pg_conns = None
    if oracle.postgres:
        name = oracle.storage.rsplit("/", 1)[1]
        pg_conns = int(oracle.query(f"SELECT count(*) FROM pg_stat_activity WHERE datname = '{name}'")[0][0])
    rows = []
    procs = [("server", deploy.server.proc)] + [("worker", w.proc) for w in deploy.workers]
    for label, proc in procs:
        if proc is None or proc.poll() is not None:
            continue
        try:
            rss, fds, on_db = _proc_stats(proc.pid)
        except OSError:
            continue
        conns = pg_conns if (label == "server" and pg_conns is not None) else on_db
        rows.append(
            {
                "at": round(at, 1),
                "process": label,
                "pid": proc.pid,
                "rss_mb": rss,
                "fds": fds,
                "db_conns": conns,
            }
        )
    return rows


async def _park(client: Client, ledger: Ledger, runs: int, seconds: float, rng: random.Random) -> list[str]:
    ids: list[str] = []
    for start in range(0, runs, 50):
        batch = []
        for i in range(start, min(start + 50, runs)):
            expires = rng.uniform(seconds * 0.2, seconds * 0.9) if i % 10 == 9 else None
            batch.append(client.submit("reliab.parked", {"expires": expires}, max_attempts=1000))
        for handle in await asyncio.gather(*batch):
            ledger.record(handle.id, "started")
            ids.append(handle.id)
    return ids


async def soak(backend: str, runs: int, seconds: float, rate: float, kill_every: float,
               sample_every: float, workdir: Path, seed: int = 0) -> SoakReport:  # fmt: skip
    rng = random.Random(seed)
    report = SoakReport(backend, runs, seconds)
    pg = _create_pg() if backend == "postgresql" else None
    db = pg or str(workdir / "graph.db")
    storage = pg or f"sqlite:///{db}"
    ledger, oracle = Ledger(workdir / "ledger.jsonl"), Oracle(storage)
    deploy = GraphDeployment(workdir, db, ledger.path)
    try:
        await asyncio.to_thread(deploy.start_server)
        for _ in range(2):
            await asyncio.to_thread(deploy.start_worker, "--capacity", "32")
        async with Client(deploy.server.url, token=deploy.server.token(), timeout=60) as client:
            print(f"parking {runs} runs ...", file=sys.stderr, flush=True)
            await _park(client, ledger, runs, seconds, rng)
            deadline = time.monotonic() + max(120.0, runs / 20)
            while oracle.query("SELECT count(*) FROM runs WHERE status = 'suspended'")[0][0] < runs:
                if time.monotonic() > deadline:
                    report.failures.append("not every run parked in time")
                    break
                await asyncio.sleep(0.5)
            print(f"parked; soaking for {seconds:.0f} s", file=sys.stderr, flush=True)
            waiting: set[asyncio.Task[None]] = set()
            asked: set[str] = set()
            credit = 0.0
            began = time.monotonic()
            next_kill, next_sample = began + kill_every, began

            async def decide(approval_id: str, traverser_id: str) -> None:
                t0 = time.monotonic()
                try:
                    await client.decide_approval(approval_id, "approved")
                except (ConflictError, ServerUnavailableError):
                    return  # it expired first (a timer), or the server is busy: not a decision
                report.decisions += 1
                info = await client.wait(traverser_id, timeout=120)
                if info.status == "succeeded":
                    report.latencies.append(time.monotonic() - t0)
                else:
                    report.failures.append(f"{traverser_id} is {info.status} after its decision")

            while (now := time.monotonic()) < began + seconds:
                if now >= next_sample:
                    report.samples += _sample(deploy, oracle, now - began)
                    next_sample += sample_every
                if now >= next_kill:
                    victim = deploy.workers.pop(0)
                    await asyncio.to_thread(victim.kill)
                    report.kills += 1
                    await asyncio.to_thread(deploy.start_worker, "--capacity", "32")
                    next_kill += kill_every
                credit += rate * 0.1  # decisions due this tick (the loop ticks every 0.1 s)
                batch = int(credit)
                credit -= batch
                approvals = await client.list_approvals(limit=batch + len(waiting)) if batch else []
                # Still listed while its decision is in flight: each approval is decided once.
                fresh = [a for a in approvals if a["id"] not in asked][:batch]
                for approval in fresh:
                    asked.add(approval["id"])
                    task = asyncio.create_task(decide(str(approval["id"]), str(approval["traverser_id"])))
                    waiting.add(task)
                    task.add_done_callback(waiting.discard)
                await asyncio.sleep(0.1)
            await asyncio.gather(*waiting, return_exceptions=True)
            report.samples += _sample(deploy, oracle, time.monotonic() - began)
        report.expired = int(oracle.query("SELECT count(*) FROM waits WHERE status = 'expired'")[0][0])
        report.failures += oracle.check(ledger, EXPECT, final=True)[0]
        _check_flat(report)
    finally:
        await asyncio.to_thread(deploy.close)
        if pg is not None:
            _drop_pg(pg)
    return report


def _check_flat(report: SoakReport) -> None:
    """No trend after warm-up: the medians of the server's last third of samples are within the
    slack of its middle third (memory 25 % and 30 MB, descriptors 10, connections 4). Medians,
    because descriptors follow the requests in flight (each waiting client's long poll holds a
    socket), which a busy moment raises for one sample without anything leaking."""
    server = [s for s in report.samples if s["process"] == "server"]
    if len(server) < 3:
        report.failures.append(f"only {len(server)} samples of the server: soak longer")
        return
    third = len(server) // 3
    middle, last = server[third : 2 * third], server[2 * third :]
    for what, grows in (
        ("rss_mb", lambda a, b: b > max(a * 1.25, a + 30)),
        ("fds", lambda a, b: b > a + 10),
        ("db_conns", lambda a, b: b > a + 4),
    ):
        before = statistics.median(s[what] for s in middle)
        after = statistics.median(s[what] for s in last)
        if grows(before, after):
            report.failures.append(f"server {what} grew from a median of {before} to {after}")


def make_parser() -> argparse.ArgumentParser:
    parser = argparse.ArgumentParser(prog="python -m tests.reliability.soak", description=__doc__)
    parser.add_argument("--minutes", type=float, default=10.0)
    parser.add_argument("--seconds", type=float, help="instead of --minutes (the smoke)")
    parser.add_argument("--runs", type=int, default=10_000)
    parser.add_argument("--rate", type=float, default=10.0, help="decisions per second")
    parser.add_argument("--kill-every", type=float, default=60.0)
    parser.add_argument("--sample-every", type=float, default=10.0)
    parser.add_argument("--backend", choices=("sqlite", "postgresql"), default="sqlite")
    parser.add_argument("--workdir", type=Path)
    parser.add_argument("--json", action="store_true", help="the report and every sample as JSON")
    return parser


def main(argv: list[str] | None = None) -> int:
    ns = make_parser().parse_args(argv)
    seconds = ns.seconds if ns.seconds is not None else ns.minutes * 60
    workdir = ns.workdir or Path(tempfile.mkdtemp(prefix="soak-"))
    workdir.mkdir(parents=True, exist_ok=True)
    report = asyncio.run(soak(ns.backend, ns.runs, seconds, ns.rate, ns.kill_every, ns.sample_every, workdir))
    if ns.json:
        print(json.dumps({"summary": report.summary(), "samples": report.samples}, indent=1))
    else:
        for key, value in report.summary().items():
            print(f"{key:28} {value}")
        print(f"\n{'at s':>7} {'process':8} {'pid':>7} {'rss MB':>8} {'fds':>5} {'db conns':>8}")
        for s in report.samples:
            row = f"{s['at']:>7} {s['process']:8} {s['pid']:>7} {s['rss_mb']:>8.1f}"
            print(f"{row} {s['fds']:>5} {s['db_conns']:>8}")
    return 1 if report.failures else 0


if __name__ == "__main__":
    raise SystemExit(main())
