"""More processes on one SQLite file: does a second local runtime use the second core?

    .venv/bin/python -m bench.processes [--n 8000] [--processes 1 2] [--repeat 3] [--out FILE]

All at once, one process is bound by its Python: the event loop's thread and the store's writer
thread take turns holding the GIL, so one core is busy and the other mostly idle (bench/README.md).
The one way to put the second core to work without changing the engine is a second process: two
local runtimes on the same database file, each starting and running its own share of the runs.
This measures what that gives.

For each repetition, each process count of ``--processes`` in turn (alternated, a fresh SQLite
file each, ``synchronous=FULL`` and bench.hitl's other settings): that many processes (``spawn``)
each open pyworkflow on the file, run one warm-up run, wait at a barrier, then start their share
of ``--n`` plain three-step runs (bench.hitl's phase C workload) all at once
(``asyncio.gather``) and wait for each to complete. Reported per process count: the total runs/s
from the first start to the last completion (median and samples), each process's own runs/s, and
the CPU milliseconds per run of all the processes together (their ``process_time`` over the timed
window); and checked: every run completed exactly once, by the process that started it (no
``run_recovered``: no lease was lost and taken over).

The figures are wall-clock on a shared machine: compare the counts of one sitting, not sittings.
They are printed and written to ``bench/results/processes-sqlite.json`` (or ``--out``).
"""

from __future__ import annotations

import argparse
import asyncio
import multiprocessing
import sqlite3
import statistics
import sys
import tempfile
import time
from collections.abc import Sequence
from pathlib import Path
from typing import Any

from ._machine import describe
from ._observers import RESULTS_DIR, save_and_report

#: Seconds a process may take for its share of the runs before the benchmark gives up.
TIMEOUT = 300.0


def _child(path: str, first: int, count: int, barrier: Any, out: Any) -> None:
    """One process: pyworkflow on ``path``, a warm-up run, the barrier, then runs ``first`` ..
    ``first + count - 1`` started at once and awaited; puts ("ok", count, start, end, CPU
    seconds) on ``out``."""
    import pyworkflow

    from .hitl import RunSettings, plain

    async def main() -> tuple[float, float, float]:
        RunSettings().configure(f"sqlite:///{path}")
        try:
            await pyworkflow.wait_for_run(await pyworkflow.start(plain, -1 - first), 60)
            barrier.wait(TIMEOUT)
            cpu, started = time.process_time(), time.time()
            ids = await asyncio.gather(*(pyworkflow.start(plain, i) for i in range(first, first + count)))
            for run_id in ids:
                run = await pyworkflow.wait_for_run(run_id, TIMEOUT)
                if run.status != "completed":
                    raise RuntimeError(f"run {run_id}: {run.status} ({run.error})")
            return started, time.time(), time.process_time() - cpu
        finally:
            await pyworkflow.shutdown()

    try:
        out.put(("ok", count, *asyncio.run(main())))
    except BaseException as exc:  # the parent reports it
        barrier.abort()
        out.put(("error", repr(exc)))


def _check(path: Path, n: int, processes: int) -> None:
    """Every run completed once; none was recovered from a lost lease."""
    conn = sqlite3.connect(path)
    try:
        completed = conn.execute("SELECT COUNT(*) FROM runs WHERE status = 'completed'").fetchone()[0]
        others = conn.execute("SELECT COUNT(*) FROM runs WHERE status <> 'completed'").fetchone()[0]
        ends = conn.execute("SELECT COUNT(*) FROM events WHERE type = 'run_completed'").fetchone()[0]
        recovered = conn.execute("SELECT COUNT(*) FROM events WHERE type = 'run_recovered'").fetchone()[0]
    finally:
        conn.close()
    expected = n + processes  # and a warm-up run each
    if (completed, others, ends, recovered) != (expected, 0, expected, 0):
        raise RuntimeError(
            f"{processes} processes: {completed} runs completed, {others} not, {ends} run_completed"
            f" events, {recovered} run_recovered (expected {expected}, 0, {expected}, 0)"
        )


def measure(n: int, processes: int, directory: Path) -> dict[str, Any]:
    """One sample: ``n`` runs shared by ``processes`` processes on a fresh file."""
    path = directory / f"processes-{processes}-{time.monotonic_ns()}.db"
    ctx = multiprocessing.get_context("spawn")
    barrier, out = ctx.Barrier(processes), ctx.Queue()
    shares = [n // processes + (1 if k < n % processes else 0) for k in range(processes)]
    firsts = [sum(shares[:k]) for k in range(processes)]
    children = [
        ctx.Process(target=_child, args=(str(path), firsts[k], shares[k], barrier, out), daemon=True)
        for k in range(processes)
    ]
    for child in children:
        child.start()
    try:
        outcomes = [out.get(timeout=TIMEOUT + 60) for _ in children]
    finally:
        for child in children:
            child.join(30)
            if child.is_alive():
                child.kill()
    errors = [o[1] for o in outcomes if o[0] != "ok"]
    if errors:
        raise RuntimeError(f"{processes} processes: {errors}")
    _check(path, n, processes)
    started, ended = min(o[2] for o in outcomes), max(o[3] for o in outcomes)
    return {
        "runs_per_s": n / (ended - started),
        "each_runs_per_s": sorted(
            (count / (end - start) for _, count, start, end, _ in outcomes), reverse=True
        ),
        "cpu_ms_per_run": sum(o[4] for o in outcomes) / n * 1000,
    }


def run(n: int, counts: Sequence[int], repeat: int) -> dict[str, Any]:
    samples: dict[int, list[dict[str, Any]]] = {p: [] for p in counts}
    with tempfile.TemporaryDirectory(prefix="pyworkflow-processes-") as directory:
        for _ in range(repeat):
            for p in counts:  # alternated: the machine's drift falls on every count alike
                samples[p].append(measure(n, p, Path(directory)))
    figures = {}
    for p, got in samples.items():
        rates = [s["runs_per_s"] for s in got]
        middle = got[rates.index(statistics.median_low(rates))]
        figures[str(p)] = {
            "runs_per_s": round(statistics.median(rates)),
            "samples": [round(r) for r in rates],
            "each_runs_per_s": [round(r) for r in middle["each_runs_per_s"]],
            "cpu_ms_per_run": round(statistics.median(s["cpu_ms_per_run"] for s in got), 3),
        }
    return {
        "n": n,
        "repeat": repeat,
        "workload": "plain three-step runs, started at once (asyncio.gather), shared evenly",
        "settings": "SQLite synchronous=FULL; bench.hitl's RunSettings (lease_ttl 30, poll_interval 0.05)",
        "machine": describe(),
        "sqlite": sqlite3.sqlite_version,
        "processes": figures,
    }


def report(result: dict[str, Any]) -> None:
    print(
        f"{result['n']} plain runs all at once on one SQLite file (synchronous=FULL), shared by"
        f" 1..P processes; medians of {result['repeat']}, the counts alternated"
        f" (SQLite {result['sqlite']}, Python {sys.version.split()[0]}):"
    )
    for p, f in result["processes"].items():
        print(
            f"  {p} process{'es' if p != '1' else ''}: {f['runs_per_s']:>6,} runs/s (samples {f['samples']});"
            f" each {f['each_runs_per_s']}; CPU {f['cpu_ms_per_run']:.3f} ms a run, all processes"
        )
    print(f"results: {result['out']}")


def main(argv: Sequence[str] | None = None) -> int:
    parser = argparse.ArgumentParser(prog="python -m bench.processes", description=__doc__.split("\n")[0])
    parser.add_argument("--n", type=int, default=8000, help="runs a sample, all processes (default 8000)")
    parser.add_argument(
        "--processes", type=int, nargs="+", default=[1, 2], help="process counts to compare (default 1 2)"
    )
    parser.add_argument("--repeat", type=int, default=3, help="samples a process count (default 3)")
    parser.add_argument("--out", type=Path, default=RESULTS_DIR / "processes-sqlite.json")
    args = parser.parse_args(argv)
    if args.repeat < 1 or min(args.processes) < 1 or args.n < max(args.processes):
        parser.error("--repeat and --processes must be at least 1, and --n at least the largest count")
    if max(args.processes) > 16:
        parser.error("--processes: at most 16")
    return save_and_report(args.out, run(args.n, args.processes, args.repeat), report)


if __name__ == "__main__":
    raise SystemExit(main())
