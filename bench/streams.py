"""K users at once, each one run at a time: throughput and latency between the two modes of bench.hitl.

    .venv/bin/python -m bench.streams [--n 2400] [--streams 1 8 64] [--repeat 3] [--engines waves thread]

``bench.hitl`` drives runs all at once (N calls in one ``asyncio.gather``) or one at a time; a
service in production is mostly between the two: K callers, each waiting for its own run before
it makes the next call. Here K *streams* share N runs; each stream takes its runs in turn and,
like ``bench.hitl``'s one-at-a-time mode, starts a run and waits until it is suspended (phase A),
resumes it and waits until it completed (phase B), starts a plain three-step run and waits until
it completed (phase C). The workload and settings are ``bench.hitl``'s (SQLite, a fresh file a
sample, ``synchronous=FULL``).

Reported per K and phase: runs/s (median of ``--repeat`` samples, the samples), the latency of a
run from the call to the status its phase waits for (p50 / p99 over all of the samples' runs),
the store's commits a run and the process's CPU a run. By default every K is measured with two
engines, alternated sample by sample: ``waves``, the default engine (the writes made in one pass
of the event loop commit together on the loop, ``store/_inline.py``), and ``thread``, every
write that cannot run inline handed to the writer thread (as before the waves).

The figures are wall-clock on a shared machine: compare the counts of one sitting, not sittings.
They are printed and written to ``bench/results/streams-sqlite.json`` (or ``--out``).
"""

from __future__ import annotations

import argparse
import asyncio
import sqlite3
import statistics
import sys
import tempfile
import time
from collections.abc import Awaitable, Callable, Sequence
from pathlib import Path
from typing import Any

import pyworkflow
from pyworkflow.store import _group_commit

from ._costs import cpu_now
from ._machine import describe
from ._observers import RESULTS_DIR, SQLiteObserver, save_and_report, storage_url
from .hitl import COUNTERS, HITL, LABELS, PLAIN, RunSettings, hitl, payload_for, plain, wait_run
from .parked import quantiles

#: ``--engines``: how the writes made on the event loop are committed (``WAVES`` of
#: ``pyworkflow.store._group_commit``), and what the report calls each.
ENGINES = {
    "waves": (True, "waves committed on the loop (the default engine)"),
    "thread": (False, "the writer thread only (no waves)"),
}


def _commits() -> tuple[int, int, int]:
    """The store's commits so far: all of them, those run inline by a caller, and the waves'."""
    db = pyworkflow.get_store().db  # type: ignore[attr-defined]
    return db.commits, db.inline_commits, db.wave_commits


async def _phase(
    k: int, n: int, one: Callable[[int], Awaitable[None]]
) -> tuple[float, list[float], float, list[int]]:
    """Runs 0..n-1 shared by ``k`` streams, each awaiting ``one(i)`` for its runs in turn: the
    phase's seconds, each run's latency (ms), the CPU seconds and the store's commits (all,
    inline, in waves)."""
    latencies: list[float] = []

    async def stream(s: int) -> None:
        for i in range(s, n, k):
            started = time.perf_counter()
            await one(i)
            latencies.append((time.perf_counter() - started) * 1000)

    commits, cpu, started = _commits(), cpu_now()["process"], time.perf_counter()
    await asyncio.gather(*(stream(s) for s in range(k)))
    seconds = time.perf_counter() - started
    return (
        seconds,
        latencies,
        cpu_now()["process"] - cpu,
        [b - a for a, b in zip(commits, _commits(), strict=True)],
    )


async def sample(k: int, n: int, engine: str, path: Path) -> dict[str, Any]:
    """One sample: phases A, B and C with ``k`` streams on a fresh file, checked afterwards."""
    RunSettings().configure(storage_url("sqlite", path, None))
    saved = _group_commit.WAVES
    _group_commit.WAVES = ENGINES[engine][0]
    COUNTERS.prepare_calls = 0
    COUNTERS.tokens.clear()
    run_ids: dict[int, str] = {}
    try:
        await pyworkflow.wait_for_run(await pyworkflow.start(plain, -1), 30)  # the runtime, warm

        async def start(i: int) -> None:
            run_ids[i] = await pyworkflow.start(hitl, i)
            await wait_run(run_ids[i], "suspended")

        async def resume(i: int) -> None:
            await pyworkflow.resume_hook(COUNTERS.tokens[i], payload_for(i))
            await wait_run(run_ids[i], "completed")

        async def start_plain(i: int) -> None:
            await wait_run(await pyworkflow.start(plain, i), "completed")

        phases = {
            name: await _phase(k, n, one) for name, one in (("A", start), ("B", resume), ("C", start_plain))
        }
    finally:
        await pyworkflow.shutdown()
        _group_commit.WAVES = saved
    _check(path, n)
    return phases


def _check(path: Path, n: int) -> None:
    """Every HITL run completed with its own payload, ``prepare`` ran once a run, and every plain
    run completed (and the warm-up's), read through a connection of its own."""
    obs = SQLiteObserver(str(path))
    try:
        hitl_done, plain_done = obs.count(HITL, "completed"), obs.count(PLAIN, "completed")
        others = obs.conn.execute("SELECT COUNT(*) FROM runs WHERE status <> 'completed'").fetchone()[0]
        wrong = [r for r in obs.results(HITL) if r.get("feedback") != payload_for(r["i"])]
    finally:
        obs.close()
    if (hitl_done, plain_done, others, len(wrong), COUNTERS.prepare_calls) != (n, n + 1, 0, 0, n):
        raise RuntimeError(
            f"{hitl_done} HITL runs completed, {len(wrong)} without their own payload; {plain_done} plain"
            f" runs completed; {others} not completed; prepare ran {COUNTERS.prepare_calls} times"
            f" (expected {n}, 0; {n + 1}; 0; {n})"
        )


def run(n: int, ks: Sequence[int], repeat: int, engines: Sequence[str]) -> dict[str, Any]:
    samples: dict[tuple[int, str], list[dict[str, Any]]] = {(k, e): [] for k in ks for e in engines}
    with tempfile.TemporaryDirectory(prefix="pyworkflow-streams-") as directory:
        for r in range(repeat):
            for k, w in samples:  # alternated: the machine's drift falls on every setting alike
                path = Path(directory) / f"streams-{k}-{w}-{r}.db"
                samples[(k, w)].append(asyncio.run(sample(k, n, w, path)))
    figures: dict[str, Any] = {}
    for (k, w), got in samples.items():
        by_phase = {}
        for name in ("A", "B", "C"):
            rates = [n / s[name][0] for s in got]
            latency = quantiles([ms for s in got for ms in s[name][1]])
            by_phase[name] = {
                "runs_per_s": round(statistics.median(rates), 1),
                "samples": [round(x, 1) for x in rates],
                "latency_ms_p50": round(latency["p50"], 2),
                "latency_ms_p99": round(latency["p99"], 2),
                "commits_per_run": round(statistics.median(s[name][3][0] / n for s in got), 3),
                # by who committed: a caller inline, a wave on the loop, the writer thread
                "inline_commits_per_run": round(statistics.median(s[name][3][1] / n for s in got), 3),
                "wave_commits_per_run": round(statistics.median(s[name][3][2] / n for s in got), 3),
                "thread_commits_per_run": round(
                    statistics.median((s[name][3][0] - s[name][3][1] - s[name][3][2]) / n for s in got), 3
                ),
                "cpu_ms_per_run": round(statistics.median(s[name][2] * 1000 / n for s in got), 3),
            }
        figures.setdefault(str(k), {})[w] = by_phase
    return {
        "n": n,
        "repeat": repeat,
        "workload": "bench.hitl's: A start+suspend, B resume+complete, C plain (3 steps); K streams"
        " share N runs, each awaiting its run's status before its next call",
        "settings": f"SQLite synchronous=FULL; {RunSettings().described()}",
        "machine": describe(),
        "sqlite": sqlite3.sqlite_version,
        "streams": figures,
    }


def report(result: dict[str, Any]) -> None:
    print(
        f"{result['n']} runs a phase shared by K streams, each one run at a time (SQLite"
        f" {result['sqlite']}, synchronous=FULL, Python {sys.version.split()[0]}); medians of"
        f" {result['repeat']}, the settings alternated; latency from the call to the phase's status:"
    )
    for k, engines in result["streams"].items():
        for engine, phases in engines.items():
            print(f"  K={k:<4} {ENGINES[engine][1]}:")
            for name, f in phases.items():
                print(
                    f"    {name} {LABELS[name]:<16} {f['runs_per_s']:>8,.1f} runs/s (samples {f['samples']});"
                    f" latency p50 {f['latency_ms_p50']:.2f} ms, p99 {f['latency_ms_p99']:.2f} ms;"
                    f" {f['cpu_ms_per_run']:.3f} ms of CPU a run; {f['commits_per_run']:.3f} commits a run"
                    f" (inline {f['inline_commits_per_run']:.3f}, waves {f['wave_commits_per_run']:.3f},"
                    f" writer thread {f['thread_commits_per_run']:.3f})"
                )
    print(f"results: {result['out']}")


def main(argv: Sequence[str] | None = None) -> int:
    parser = argparse.ArgumentParser(prog="python -m bench.streams", description=__doc__.split("\n")[0])
    parser.add_argument("--n", type=int, default=2400, help="runs a phase, all streams (default 2400)")
    parser.add_argument(
        "--streams", type=int, nargs="+", default=[1, 8, 64], help="K values (default 1 8 64)"
    )
    parser.add_argument("--repeat", type=int, default=3, help="samples a setting (default 3)")
    parser.add_argument(
        "--engines", nargs="+", choices=tuple(ENGINES), default=["waves", "thread"],
        help="how the loop's writes commit: in waves on the loop (the default engine), or by the"
        " writer thread alone (thread, as before the waves); default: both",
    )  # fmt: skip
    parser.add_argument("--out", type=Path, default=RESULTS_DIR / "streams-sqlite.json")
    args = parser.parse_args(argv)
    if args.repeat < 1 or min(args.streams) < 1 or args.n < max(args.streams):
        parser.error("--repeat and --streams must be at least 1, and --n at least the largest K")
    if max(args.streams) > 1000:
        parser.error("--streams: at most 1000 (the runtime's max_concurrency)")
    return save_and_report(args.out, run(args.n, args.streams, args.repeat, args.engines), report)


if __name__ == "__main__":
    raise SystemExit(main())
