"""The human-in-the-loop (HITL) benchmark of issue 2.

    .venv/bin/python -m bench.hitl [--n 2000] [--store sqlite|postgresql] [--quick]

Workload, on a fresh database (SQLite: a new file, WAL, ``synchronous=FULL`` unless told otherwise):

* phase A, start+suspend: N runs of ``bench.hitl``: step ``prepare`` returns a ~200-byte dict, then
  step ``review`` saves a ~200-byte checkpoint and suspends on ``step_hook``. A ends when the store
  (counted through a separate connection, not from in-memory state) holds N suspended runs.
* phase B, resume+complete: ``resume_hook`` for every run with a small payload. B ends when the store
  holds N completed runs; then every result is checked to carry its own payload, and ``prepare``
  must not have run again (N calls in total).
* phase C, plain: N runs of ``bench.plain``, three steps, no suspension.

Also measured: peak RSS, database bytes per completed run (file + WAL after a checkpoint), threads
and asyncio tasks while all N runs are suspended, store commits per run, and whether the cost of
one resume+complete stays flat as history grows (many suspended runs; a run with a long event log).
Figures are printed and written as JSON to ``bench/results/hitl-<store>.json``
(``hitl-<store>-quick.json`` with ``--quick``, or ``--out``).
"""

from __future__ import annotations

import argparse
import asyncio
import contextlib
import math
import os
import platform
import resource
import sqlite3
import statistics
import sys
import tempfile
import threading
import time
from collections.abc import Callable, Sequence
from dataclasses import asdict, dataclass, field
from pathlib import Path
from typing import Any

import pyworkflow
from pyworkflow import (
    delete_step_checkpoint,
    load_step_checkpoint,
    save_step_checkpoint,
    step,
    step_hook,
    workflow,
)
from pyworkflow.store import YOUNG_GC_THRESHOLD, _group_commit, metrics

from ._costs import cpu_now, gc_collections_now, gc_threshold
from ._disk import ceiling, commit_floor
from ._fsyncs import STRACE_ARGS, FsyncCounter, strace_available
from ._machine import describe
from ._observers import RESULTS_DIR, Observer, fresh_database, make_observer, save_and_report, storage_url

HITL = "bench.hitl"
PLAIN = "bench.plain"

# Targets from issue 2.
TARGET_RUNS_PER_S = 3000.0
TARGET_BYTES_PER_RUN = 2048
TARGET_FLAT_RATIO = 1.5

_PREPARE_PAD = "p" * 150  # the serialized dict returned by prepare is ~200 bytes
_CHECKPOINT_PAD = "c" * 150  # the serialized checkpoint is ~200 bytes


@dataclass
class Counters:
    prepare_calls: int = 0
    tokens: dict[int, str] = field(default_factory=dict)


COUNTERS = Counters()


# -- the workload -------------------------------------------------------------------------------


@step
async def prepare(i: int) -> dict[str, Any]:
    COUNTERS.prepare_calls += 1
    return {"i": i, "title": f"draft #{i}", "body": _PREPARE_PAD, "words": 42, "lang": "en"}


@step
async def review(i: int, prepared: dict[str, Any]) -> dict[str, Any]:
    checkpoint = await load_step_checkpoint()
    if checkpoint is None:
        await save_step_checkpoint({"i": i, "stage": "sent-for-review", "notes": _CHECKPOINT_PAD})

    def notify(token: str) -> None:
        COUNTERS.tokens[i] = token

    feedback = await step_hook("review", timeout="24h", on_created=notify)
    await delete_step_checkpoint()
    return {"i": i, "title": prepared["title"], "feedback": feedback}


@workflow(name=HITL)
async def hitl(i: int) -> dict[str, Any]:
    prepared = await prepare(i)
    return await review(i, prepared)


@step
async def fetch(i: int) -> dict[str, Any]:
    return {"i": i, "data": "f" * 40}


@step
async def transform(value: dict[str, Any]) -> dict[str, Any]:
    return {"i": value["i"], "data": value["data"].upper()}


@step
async def store_result(value: dict[str, Any]) -> dict[str, Any]:
    return {"i": value["i"], "stored": True}


@workflow(name=PLAIN)
async def plain(i: int) -> dict[str, Any]:
    fetched = await fetch(i)
    transformed = await transform(fetched)
    return await store_result(transformed)


def payload_for(i: int) -> dict[str, Any]:
    return {"approved": True, "i": i, "note": "ok"}


# -- helpers --------------------------------------------------------------------------------------


async def until(check: Callable[[], bool], *, what: str, timeout: float, interval: float = 0.01) -> None:
    deadline = time.monotonic() + timeout
    while not check():
        if time.monotonic() > deadline:
            raise TimeoutError(f"timed out after {timeout} s waiting for {what}")
        await asyncio.sleep(interval)


def peak_rss_mb() -> float:
    return resource.getrusage(resource.RUSAGE_SELF).ru_maxrss / 1024  # KiB on Linux


def writer_count(name: str) -> int | None:
    """One of the store's writer counts so far (``commits``, ``wakeups``), None without one."""
    db = getattr(pyworkflow.get_store(), "db", None)
    value = getattr(db, name, None)
    return int(value) if isinstance(value, int) else None


def commits() -> int | None:
    return writer_count("commits")


def transactions_now() -> tuple[float, float]:
    """(count, seconds) of the writers' transactions so far, in this process: the group commit's
    own timing of each (its statements and its commit; ``pyworkflow_group_commit_seconds``)."""
    count = total = 0.0
    for family in metrics.GROUP_COMMITS.collect():
        if family.name != metrics.WriterBatches.SECONDS:
            continue
        for sample in family.samples:
            if sample.name.endswith("_count"):
                count += sample.value
            elif sample.name.endswith("_sum"):
                total += sample.value
    return count, total


def per_run(delta: int | None, n: int) -> float | None:
    return None if delta is None else round(delta / n, 3)


@dataclass
class Phase:
    name: str
    runs: int
    seconds: float
    commits: int | None
    cpu: dict[str, float]
    fsyncs: int | None = None
    #: the writers' transactions in the phase: how many, and their time (statements and commit)
    transactions: tuple[float, float] = (0.0, 0.0)
    #: the garbage collector's collections in the phase, by generation (gc.get_stats)
    gc_collections: tuple[int, ...] = ()
    #: how often the writer thread woke in the phase (each a thread switch and a GIL hand-off)
    wakeups: int | None = None

    def as_dict(self) -> dict[str, Any]:
        return {
            "runs": self.runs,
            "seconds": round(self.seconds, 4),
            "runs_per_s": round(self.runs / self.seconds, 1),
            "commits": self.commits,
            "commits_per_run": per_run(self.commits, self.runs),
            "writer_wakeups_per_run": per_run(self.wakeups, self.runs),
            # strace's count (a traced pass of its own; None when not counted)
            "fsyncs": self.fsyncs,
            "fsyncs_per_run": per_run(self.fsyncs, self.runs),
            # CPU time per run (less sensitive to a busy machine than the wall clock): the whole
            # process, the event loop's thread, and the store's writer threads.
            **{f"{k}_cpu_ms_per_run": round(v * 1000 / self.runs, 4) for k, v in self.cpu.items()},
            # The engine's own transactions, as the writer timed them: their mean (statements and
            # commit) and the share of the phase's time spent in them. One at a time, the rest is
            # the Python between them (a commit's latency is not the disk's alone: see _disk.py).
            "transaction_ms": round(self.transactions[1] * 1000 / self.transactions[0], 4)
            if self.transactions[0]
            else None,
            "in_transactions": round(self.transactions[1] / self.seconds, 4),
            # A count, not a time: how often the collector walked the heap (store/_gc.py)
            "gc_collections": list(self.gc_collections),
        }


async def timed_phase(
    name: str, n: int, work: Callable[[], Any], done: Callable[[], bool], timeout: float, count_fsyncs: bool
) -> Phase:
    """Run one phase; with ``count_fsyncs`` under strace (fsyncs counted, timings slowed)."""
    tracer = FsyncCounter() if count_fsyncs else contextlib.nullcontext()
    with tracer:
        before, cpu_before, tx_before = commits(), cpu_now(), transactions_now()
        woken = writer_count("wakeups")
        gc_before = gc_collections_now()
        started = time.perf_counter()
        await work()
        await until(done, what=f"phase {name}", timeout=timeout)
        seconds = time.perf_counter() - started
        cpu = {k: v - cpu_before[k] for k, v in cpu_now().items()}
        after, tx_after, woken_after = commits(), transactions_now(), writer_count("wakeups")
        collected = tuple(b - a for a, b in zip(gc_before, gc_collections_now(), strict=True))
    delta = None if before is None or after is None else after - before
    fsyncs = tracer.fsyncs if isinstance(tracer, FsyncCounter) else None
    tx = (tx_after[0] - tx_before[0], tx_after[1] - tx_before[1])
    wakeups = None if woken is None or woken_after is None else woken_after - woken
    return Phase(name, n, seconds, delta, cpu, fsyncs, tx, collected, wakeups)


# -- the three phases, in two modes -----------------------------------------------------------------

#: How runs are driven: all at once, or one at a time (each run is started, or resumed, only after
#: the previous one reached the status its phase waits for: the latency-bound case, where group
#: commit cannot share a commit between runs).
MODES = {
    "all_at_once": "all at once (asyncio.gather of N calls)",
    "one_at_a_time": "one at a time (start, wait until suspended, next; resume, wait until completed, next)",
}


@dataclass(frozen=True)
class RunSettings:
    """The pyworkflow settings the benchmark runs with; the output names every non-default one."""

    synchronous: str = "FULL"
    lease_ttl: float = 30.0
    poll_interval: float = 0.05
    max_concurrency: int = 1000
    gc_threshold: int | None = YOUNG_GC_THRESHOLD

    def configure(self, storage: str) -> None:
        pyworkflow.configure(
            storage=storage,
            synchronous=self.synchronous,
            lease_ttl=self.lease_ttl,
            poll_interval=self.poll_interval,
            max_concurrency=self.max_concurrency,
            gc_threshold=self.gc_threshold,
        )

    def described(self) -> str:
        """``name=value`` for every setting, non-defaults marked ``(non-default)``."""
        default = RunSettings()
        return ", ".join(
            f"{k}={v}{'' if v == getattr(default, k) else ' (non-default)'}" for k, v in asdict(self).items()
        )


async def wait_run(run_id: str, status: str) -> None:
    """Wait until the run reaches ``status`` (through the runtime's end-of-turn signal and the
    store); a run that failed instead stops the benchmark."""
    run = await pyworkflow.wait_for_run(run_id, 60, until=(status, "failed", "cancelled"))
    if run.status != status:
        raise RuntimeError(f"run {run_id}: {run.status} instead of {status}: {run.error}")


async def run_phases(
    n: int, mode: str, store: str, path: Path, url: str | None, settings: RunSettings, count_fsyncs: bool
) -> dict[str, Any]:
    settings.configure(storage_url(store, path, url))
    pyworkflow.get_store()  # opens (and migrates) the database before the observer connects
    obs = make_observer(store, path, url)
    # Under strace every system call is slower, so one at a time the end of a suspended turn
    # (written with the next run's first commit in the timed passes: 4.000 commits per run) could
    # outwait DEFER_LINGER and commit alone, counting fsyncs the engine does not cost untraced.
    # The traced pass holds it for the next commit instead: its commits per run are reported
    # beside the fsyncs (commits_per_run_traced) and match the timed passes'.
    linger = _group_commit.DEFER_LINGER
    if count_fsyncs:
        _group_commit.DEFER_LINGER = 60.0
    timeout = max(120.0, n / 10)
    one = mode == "one_at_a_time"
    try:
        # Warm-up: one plain run starts the runtime (its loop and heartbeat tasks, the writer thread).
        warm = await pyworkflow.start(plain, -1)
        await pyworkflow.wait_for_run(warm, 30)
        idle_threads, idle_tasks = threading.active_count(), len(asyncio.all_tasks())
        empty_bytes = obs.size_bytes()

        COUNTERS.prepare_calls = 0
        COUNTERS.tokens.clear()
        run_ids: dict[int, str] = {}

        async def start_hitl() -> None:
            if not one:
                ids = await asyncio.gather(*(pyworkflow.start(hitl, i) for i in range(n)))
                run_ids.update(enumerate(ids))
                return
            for i in range(n):
                run_ids[i] = await pyworkflow.start(hitl, i)
                await wait_run(run_ids[i], "suspended")

        # Each phase ends when the store holds its N runs in the target status (polled through the
        # observer's own connection; the warm-up run is the one completed run before phase B).
        target = obs.count_status("suspended") + n
        a = await timed_phase(
            "A", n, start_hitl, lambda: obs.count_status("suspended") >= target, timeout, count_fsyncs
        )
        # Turns end just after their suspension commits; let them finish (up to 2 s), then count.
        deadline = time.monotonic() + 2
        while len(asyncio.all_tasks()) > idle_tasks and time.monotonic() < deadline:
            await asyncio.sleep(0.01)
        suspended_threads, suspended_tasks = threading.active_count(), len(asyncio.all_tasks())
        still_suspended = obs.count(HITL, "suspended")
        if len(COUNTERS.tokens) != n:
            raise RuntimeError(f"phase A: {len(COUNTERS.tokens)} tokens delivered, expected {n}")
        waiting_bytes = obs.size_bytes()

        async def resume_hitl() -> None:
            if not one:
                await asyncio.gather(
                    *(pyworkflow.resume_hook(COUNTERS.tokens[i], payload_for(i)) for i in range(n))
                )
                return
            for i in range(n):
                await pyworkflow.resume_hook(COUNTERS.tokens[i], payload_for(i))
                await wait_run(run_ids[i], "completed")

        target = obs.count_status("completed") + n
        b = await timed_phase(
            "B", n, resume_hitl, lambda: obs.count_status("completed") >= target, timeout, count_fsyncs
        )
        results = obs.results(HITL)
        wrong = [r for r in results if r.get("feedback") != payload_for(r["i"])]
        if len(results) != n or wrong:
            raise RuntimeError(f"phase B: {len(results)} results, {len(wrong)} without their own payload")
        if COUNTERS.prepare_calls != n:
            raise RuntimeError(f"phase B: prepare ran {COUNTERS.prepare_calls} times for {n} runs")
        hitl_bytes = obs.size_bytes()

        async def start_plain() -> None:
            if not one:
                await asyncio.gather(*(pyworkflow.start(plain, i) for i in range(n)))
                return
            for i in range(n):
                await wait_run(await pyworkflow.start(plain, i), "completed")

        target = obs.count_status("completed") + n
        c = await timed_phase(
            "C", n, start_plain, lambda: obs.count_status("completed") >= target, timeout, count_fsyncs
        )
        if obs.count(PLAIN, "completed") != n + 1:
            raise RuntimeError(
                f"phase C: {obs.count(PLAIN, 'completed')} plain runs completed, expected {n + 1}"
            )
        total_bytes = obs.size_bytes()
        return {
            "phases": {p.name: p.as_dict() for p in (a, b, c)},
            "prepare_calls": COUNTERS.prepare_calls,
            "peak_rss_mb": round(peak_rss_mb(), 1),
            # Per workload, each the growth of the file (+ WAL, after a checkpoint) over its phase:
            # a waiting HITL run holds its wait, its step's 200-byte checkpoint and its events; a
            # completed one no longer has the checkpoint (deleted with its step's result).
            "db": {
                "bytes_total": total_bytes,
                "bytes_empty": empty_bytes,
                "bytes_per_waiting_hitl_run": round((waiting_bytes - empty_bytes) / n),
                "bytes_per_completed_hitl_run": round((hitl_bytes - empty_bytes) / n),
                "bytes_per_plain_run": round((total_bytes - hitl_bytes) / n),
            },
            "while_suspended": {
                "suspended_runs": still_suspended,
                "threads": suspended_threads,
                "tasks": suspended_tasks,
                "threads_idle": idle_threads,
                "tasks_idle": idle_tasks,
                "threads_per_waiting_run": (suspended_threads - idle_threads) / n,
                "tasks_per_waiting_run": (suspended_tasks - idle_tasks) / n,
            },
        }
    finally:
        await pyworkflow.shutdown()
        obs.close()
        _group_commit.DEFER_LINGER = linger


def combine(rounds: list[dict[str, Any]], traced: dict[str, Any] | None) -> dict[str, Any]:
    """Medians over the timed repetitions of phases A-C (every figure separately), with the
    samples; fsyncs from the traced pass (``traced``: its timings are not used)."""
    combined = dict(rounds[-1])
    phases: dict[str, Any] = {}
    for name in rounds[0]["phases"]:
        samples = [r["phases"][name] for r in rounds]
        merged: dict[str, Any] = {}
        for key, value in samples[0].items():
            values = [x[key] for x in samples]
            if isinstance(value, list):  # per generation: the median of each
                merged[key] = [statistics.median(column) for column in zip(*values, strict=True)]
            else:
                merged[key] = value if value is None else statistics.median(values)
        merged["runs_per_s_samples"] = [x["runs_per_s"] for x in samples]
        if traced is not None:
            t = traced["phases"][name]
            merged["fsyncs"], merged["fsyncs_per_run"] = t["fsyncs"], t["fsyncs_per_run"]
            merged["commits_per_run_traced"] = t["commits_per_run"]
        phases[name] = merged
    combined["phases"] = phases
    combined["repetitions"] = len(rounds)
    combined["peak_rss_mb"] = max(r["peak_rss_mb"] for r in rounds)
    for key in rounds[0]["db"]:
        combined["db"][key] = statistics.median(r["db"][key] for r in rounds)
    return combined


# -- resume cost as history grows ------------------------------------------------------------------


class Prober:
    """Starts probe runs (``bench.hitl`` with ids from its own reserved range) on one database and
    times one resume+complete each: from ``resume_hook`` until the run is completed."""

    def __init__(self, first_i: int) -> None:
        self.next_i = first_i
        self.run_ids: dict[int, str] = {}
        self.obs: Observer | None = None

    def observer(self) -> Observer:
        assert self.obs is not None, "engine not open"
        return self.obs

    async def start(self, count: int) -> list[int]:
        ids = list(range(self.next_i, self.next_i + count))
        self.next_i += count
        obs = self.observer()
        before = obs.count(HITL, "suspended")
        run_ids = await asyncio.gather(*(pyworkflow.start(hitl, i) for i in ids))
        self.run_ids.update(zip(ids, run_ids, strict=True))
        await until(lambda: obs.count(HITL, "suspended") >= before + count, what="probes", timeout=120)
        return ids

    async def resume_ms(self, i: int) -> float:
        started = time.perf_counter()
        await pyworkflow.resume_hook(COUNTERS.tokens[i], payload_for(i))
        run = await pyworkflow.wait_for_run(self.run_ids[i], 60)
        elapsed = (time.perf_counter() - started) * 1000
        if run.status != "completed" or run.result["feedback"] != payload_for(i):
            raise RuntimeError(f"probe {i}: {run.status} {run.result!r}")
        return elapsed


def summary(samples: list[float]) -> dict[str, Any]:
    return {"median_ms": round(statistics.median(samples), 3), "samples_ms": [round(s, 3) for s in samples]}


@dataclass
class Engine:
    """Opens pyworkflow on one database at a time (the API is process-global), with an observer."""

    store: str
    url: str | None
    settings: RunSettings

    async def open(self, path: Path, prober: Prober) -> Observer:
        self.settings.configure(storage_url(self.store, path, self.url))
        pyworkflow.get_store()  # opens (and migrates) the database before the observer connects
        prober.obs = make_observer(self.store, path, self.url)
        # One plain run starts this process's runtime, which then executes resumed runs.
        await pyworkflow.wait_for_run(await pyworkflow.start(plain, -1), 60)
        return prober.obs

    async def close(self, prober: Prober) -> None:
        await pyworkflow.shutdown()
        prober.observer().close()
        prober.obs = None


async def run_flatness(
    engine: Engine, workdir: Path, *, small: int, big: int, events_small: int, events_big: int, reps: int
) -> dict[str, Any]:
    """Resume cost as history grows. The machine is shared and noisy, so the two sides of each
    comparison are measured alternately (one sample of each per round) and compared by medians.

    * suspended runs: database S holds ``small`` suspended runs; database L holds ``small``
      engine-made ones plus clones of them (every row copied by a separate sqlite3 connection,
      with new ids and token digests) up to ``big``. Each round reopens S, resumes one background
      run (warm-up: the connection's page cache, the runtime), then times one probe; then L.
    * events in the run: in S, probe runs padded with filler ``checkpoint_saved`` events (inserted
      by a separate connection) to ``events_small`` and ``events_big`` events, resumed alternately.
    """
    small_db, big_db = workdir / "flat-small.db", workdir / "flat-big.db"
    ps, pl = Prober(10_000_000), Prober(20_000_000)
    # Build S: background, probes, and the short/long-history probes.
    obs = await engine.open(small_db, ps)
    bg_s = await ps.start(small - 3 * reps)
    probes_s = await ps.start(reps)
    short_ids = await ps.start(reps)
    long_ids = await ps.start(reps)
    short_events = [obs.pad_events(ps.run_ids[i], events_small) for i in short_ids]
    long_events = [obs.pad_events(ps.run_ids[i], events_big) for i in long_ids]
    await engine.close(ps)
    # Build L: the same engine-made runs, cloned up to `big`, then its probes.
    obs = await engine.open(big_db, pl)
    bg_l = await pl.start(small - 3 * reps)
    copies = math.ceil((big - small) / len(bg_l))
    clone_s = obs.clone_suspended([pl.run_ids[i] for i in bg_l], copies)
    probes_l = await pl.start(reps)
    await engine.close(pl)

    few: list[float] = []
    many: list[float] = []
    counts: dict[str, list[int]] = {"small": [], "big": []}
    for r in range(reps):
        for path, prober, bg, probes, out, label in (
            (small_db, ps, bg_s, probes_s, few, "small"),
            (big_db, pl, bg_l, probes_l, many, "big"),
        ):
            obs = await engine.open(path, prober)
            counts[label].append(obs.count(HITL, "suspended"))
            await prober.resume_ms(bg[r])  # warm-up, not counted
            out.append(await prober.resume_ms(probes[r]))
            await engine.close(prober)

    await engine.open(small_db, ps)
    short: list[float] = []
    long: list[float] = []
    try:
        await ps.resume_ms(bg_s[reps])  # warm-up, not counted
        for s_id, l_id in zip(short_ids, long_ids, strict=True):
            short.append(await ps.resume_ms(s_id))
            long.append(await ps.resume_ms(l_id))
    finally:
        await engine.close(ps)
    return {
        "suspended_runs": {
            "small": statistics.median(counts["small"]),
            "big": statistics.median(counts["big"]),
            "how": f"{len(bg_l)} engine-made suspended runs + {copies} copies of them inserted with SQL by a "
            f"separate sqlite3 connection ({clone_s:.1f} s); databases alternated every round",
            "resume_small": summary(few),
            "resume_big": summary(many),
            "ratio": round(statistics.median(many) / statistics.median(few), 3),
        },
        "events_in_run": {
            "small": statistics.median(short_events),
            "big": statistics.median(long_events),
            "how": "filler checkpoint_saved events appended by a separate sqlite3 connection; "
            f"short and long runs resumed alternately, in a database of {small} suspended runs",
            "resume_small": summary(short),
            "resume_big": summary(long),
            "ratio": round(statistics.median(long) / statistics.median(short), 3),
        },
    }


# -- main ---------------------------------------------------------------------------------------------

#: Targets of issue 14: runs/s per phase in each mode, and fsyncs per run one at a time.
TARGETS = {
    "all_at_once": {"A": 10_000.0, "B": 10_000.0, "C": 12_000.0},
    "one_at_a_time": {"A": 1_000.0, "B": 1_000.0, "C": 1_000.0},
}
TARGET_FSYNCS_ONE = {"A": 4.0, "B": 3.0}
LABELS = {"A": "start+suspend", "B": "resume+complete", "C": "plain (3 steps)"}


def report_mode(mode: str, m: dict[str, Any], floor: dict[str, Any] | None = None) -> None:
    print(f"  {MODES[mode]}:")
    for name, p in m["phases"].items():
        target = TARGETS[mode][name]
        ok = "ok" if p["runs_per_s"] >= target else "UNDER TARGET"
        runs = ", ".join(f"{x:.0f}" for x in p["runs_per_s_samples"])
        counts = "" if p["commits_per_run"] is None else f"{p['commits_per_run']:.3f} commits/run"
        if p.get("writer_wakeups_per_run") is not None:
            counts += f", {p['writer_wakeups_per_run']:.3f} writer wake-ups/run"
        if p.get("fsyncs_per_run") is not None:
            fs = p["fsyncs_per_run"]
            limit = TARGET_FSYNCS_ONE.get(name) if mode == "one_at_a_time" else None
            mark = "" if limit is None else f" [target <= {limit:g}: {'ok' if fs <= limit else 'OVER'}]"
            traced = p.get("commits_per_run_traced")
            beyond = "" if traced is None else f"; {traced:.3f} commits + {fs - traced:.3f} WAL checkpoints"
            counts += f", {fs:.3f} fsyncs/run (strace{beyond}){mark}"
        most = None if floor is None else ceiling(floor, p["commits_per_run"])
        if most is not None:
            counts += f"; the disk's ceiling at that many commits: {most:.0f} runs/s"
            if p.get("transaction_ms") is not None:
                counts += (f"; the engine's transactions {p['transaction_ms']:.3f} ms each, "
                           f"{p['in_transactions']:.0%} of the time")  # fmt: skip
        print(f"    phase {name} {LABELS[name]:<16} {p['runs_per_s']:>9.1f} runs/s median of [{runs}] "
              f"[target {target:.0f}: {ok}]; {counts}")  # fmt: skip
    cpu = "; ".join(
        f"{name} {p['process_cpu_ms_per_run']:.3f} (loop thread {p['main_cpu_ms_per_run']:.3f}, "
        f"writer {p['writer_cpu_ms_per_run']:.3f})"
        for name, p in m["phases"].items()
    )
    print(f"    CPU ms per run: {cpu}")
    if all(p.get("gc_collections") for p in m["phases"].values()):
        walks = "; ".join(
            f"{name} {' / '.join(f'{c:g}' for c in p['gc_collections'])}" for name, p in m["phases"].items()
        )
        print(f"    garbage collections in the phase (generations 0 / 1 / 2): {walks}")
    db = m["db"]
    ok = "ok" if db["bytes_per_completed_hitl_run"] <= TARGET_BYTES_PER_RUN else "OVER TARGET"
    print(f"    database bytes per run: waiting HITL run (with its checkpoint) "
          f"{db['bytes_per_waiting_hitl_run']}, "
          f"completed HITL run {db['bytes_per_completed_hitl_run']} [target {TARGET_BYTES_PER_RUN}: {ok}], "
          f"completed plain run {db['bytes_per_plain_run']}")  # fmt: skip
    w = m["while_suspended"]
    print(f"    while {w['suspended_runs']} runs suspended: {w['threads']} threads "
          f"(idle {w['threads_idle']}), "
          f"{w['tasks']} asyncio tasks (idle {w['tasks_idle']}); per waiting run: "
          f"{w['threads_per_waiting_run']:g} threads, {w['tasks_per_waiting_run']:g} tasks")  # fmt: skip


def report(result: dict[str, Any]) -> None:
    cfg = result["config"]
    store = f"sqlite (SQLite {cfg['sqlite']})" if cfg["store"] == "sqlite" else cfg["store"]
    print(f"HITL benchmark: N={cfg['n']}, store={store}, {cfg['cpus']} CPUs, Python {cfg['python']}")
    print(f"  settings: {cfg['settings']}")
    print(f"  fsyncs: {cfg['fsyncs']}")
    machine = cfg["machine"]
    print(f"  this processor: {machine['cpu_model']}; the Python probe ({machine['python_probe']}) "
          f"takes {machine['python_probe_ms']} ms")  # fmt: skip
    floor = result.get("commit_floor")
    if floor:
        print(f"  this disk: a bare SQLite commit of {floor['pages_per_commit']} pages (synchronous="
              f"{floor['synchronous']}, no engine) takes {floor['median_ms']:.3f} ms median, p90 "
              f"{floor['p90_ms']:.3f} ms ({floor['commits_per_s']:.0f} commits/s, "
              f"{floor['commits']} in a row)")  # fmt: skip
    for mode, m in result["modes"].items():
        report_mode(mode, m, floor if mode == "one_at_a_time" else None)
    load = f"{cfg['loadavg_at_start'][0]} / {cfg['loadavg_at_end'][0]}"
    print(f"  load average (1 min) at start/end: {load} on {cfg['cpus']} CPUs; "
          f"timed repetitions of A-C per mode: {result['repetitions']} (fresh file each)")  # fmt: skip
    print(f"  peak RSS: {result['peak_rss_mb']} MB; prepare calls per repetition: {result['prepare_calls']}")
    flat = result.get("flat")
    if flat:
        for key, label in (("suspended_runs", "suspended runs"), ("events_in_run", "events in the run")):
            f = flat[key]
            ok = "ok" if f["ratio"] <= TARGET_FLAT_RATIO else "NOT FLAT"
            print(f"  resume+complete, {label}: {f['small']} -> {f['resume_small']['median_ms']:.2f} ms, "
                  f"{f['big']} -> {f['resume_big']['median_ms']:.2f} ms (medians); ratio {f['ratio']:.2f} "
                  f"[target <= {TARGET_FLAT_RATIO}: {ok}]")  # fmt: skip
    print(f"results: {result['out']}")


def parse_args(argv: Sequence[str] | None) -> argparse.Namespace:
    parser = argparse.ArgumentParser(description=(__doc__ or "").splitlines()[0])
    parser.add_argument("--n", type=int, default=None, help="runs per phase (default 2000; 200 with --quick)")
    parser.add_argument("--store", choices=("sqlite", "postgresql"), default="sqlite")
    parser.add_argument("--url", default=os.environ.get("PYWORKFLOW_TEST_PG"), help="PostgreSQL URL")
    parser.add_argument("--mode", choices=("both", *MODES), default="both", help="how runs are driven")
    parser.add_argument("--synchronous", default="FULL", help="SQLite synchronous (default FULL)")
    parser.add_argument("--lease-ttl", type=float, default=RunSettings.lease_ttl, help="seconds (default 30)")
    parser.add_argument("--poll-interval", type=float, default=RunSettings.poll_interval,
                        help="the runtime's poll interval in seconds (default 0.05)")  # fmt: skip
    parser.add_argument("--max-concurrency", type=int, default=RunSettings.max_concurrency,
                        help="the runtime's permits, turns at once (default 1000)")  # fmt: skip
    fsyncs = parser.add_mutually_exclusive_group()
    fsyncs.add_argument("--count-fsyncs", action="store_true", default=None,
                        help="count fsyncs with strace in a traced pass per mode "
                             "(default: when strace can attach)")  # fmt: skip
    fsyncs.add_argument("--no-count-fsyncs", dest="count_fsyncs", action="store_false")
    parser.add_argument("--quick", action="store_true", help="N=200 and a small history: a smoke run")
    parser.add_argument(
        "--repeat", type=int, default=None, help="timed repetitions of phases A-C (default 3)"
    )
    parser.add_argument("--reps", type=int, default=None, help="repetitions per resume-latency figure")
    parser.add_argument("--skip-flat", action="store_true", help="skip the resume-cost-vs-history part")
    parser.add_argument("--dir", type=Path, default=None, help="where the fresh database files go")
    parser.add_argument("--out", type=Path, default=None, help="JSON output file")
    parser.add_argument(
        "--gc-threshold",
        type=gc_threshold,
        default=YOUNG_GC_THRESHOLD,
        help=f"the runtime's gc_threshold (default {YOUNG_GC_THRESHOLD}; none: CPython's own pace)",
    )
    args = parser.parse_args(argv)
    if args.max_concurrency < 1:
        parser.error(f"--max-concurrency: at least 1, not {args.max_concurrency}")
    return args


def main(argv: Sequence[str] | None = None) -> int:
    args = parse_args(argv)
    n = args.n or (200 if args.quick else 2000)
    reps = args.reps or (5 if args.quick else 15)
    sizes = (100, 1_000, 100, 1_000) if args.quick else (1_000, 100_000, 1_000, 10_000)
    workdir = args.dir or Path(tempfile.mkdtemp(prefix="pyworkflow-bench-"))
    workdir.mkdir(parents=True, exist_ok=True)
    # Only the whole run (both modes) replaces the committed results file by default: a run of
    # one mode, say one side of an A/B comparison, writes its own file.
    suffix = ("-quick" if args.quick else "") + ("" if args.mode == "both" else f"-{args.mode}")
    out = args.out or RESULTS_DIR / f"hitl-{args.store}{suffix}.json"
    settings = RunSettings(
        args.synchronous.upper(), args.lease_ttl, args.poll_interval, args.max_concurrency, args.gc_threshold
    )
    if args.count_fsyncs is None:
        count_fsyncs = strace_available()
        fsync_note = (
            "counted with strace" if count_fsyncs else "not counted (strace missing or cannot attach)"
        )
    else:
        count_fsyncs = bool(args.count_fsyncs)
        if count_fsyncs and not strace_available():
            raise SystemExit("--count-fsyncs: strace is missing or cannot attach to this process")
        fsync_note = "counted with strace" if count_fsyncs else "not counted (--no-count-fsyncs)"
    if count_fsyncs:
        fsync_note += (
            f" (`strace {' '.join(STRACE_ARGS)} -p <pid>` attached per phase, in one extra repetition per "
            "mode whose timings are not reported)"
        )
    modes = list(MODES) if args.mode == "both" else [args.mode]
    result: dict[str, Any] = {
        "config": {
            "n": n,
            "store": args.store,
            "modes": modes,
            "synchronous": settings.synchronous,
            "settings": settings.described(),
            "fsyncs": fsync_note,
            "quick": args.quick,
            "command": " ".join([Path(sys.executable).name, "-m", "bench.hitl", *(argv or sys.argv[1:])]),
            "python": platform.python_version(),
            "sqlite": sqlite3.sqlite_version,
            "cpus": os.cpu_count(),
            "platform": platform.platform(),
            "date_utc": time.strftime("%Y-%m-%dT%H:%M:%SZ", time.gmtime()),
            "loadavg_at_start": [round(x, 2) for x in os.getloadavg()],
            "database_dir": str(workdir),
            "machine": describe(),
        },
        "targets": {
            "runs_per_s": TARGETS,
            "fsyncs_per_run_one_at_a_time": TARGET_FSYNCS_ONE,
            "bytes_per_completed_hitl_run": TARGET_BYTES_PER_RUN,
            "flat_ratio": TARGET_FLAT_RATIO,
        },
        "modes": {},
    }
    if args.store == "sqlite":  # what one run at a time can reach on this disk at best
        result["commit_floor"] = commit_floor(workdir, settings.synchronous)
    repeat = args.repeat or (1 if args.quick else 3)
    for mode in modes:
        rounds = []
        for k in range(repeat + (1 if count_fsyncs else 0)):  # each repetition on a fresh database
            db = workdir / f"hitl-{mode}-{k + 1}.db"
            with fresh_database(args.store, args.url, f"{mode[:3]}{k + 1}") as url:
                traced = count_fsyncs and k == repeat
                rounds.append(asyncio.run(run_phases(n, mode, args.store, db, url, settings, traced)))
        traced_round = rounds.pop() if count_fsyncs else None
        combined = combine(rounds, traced_round)
        result["modes"][mode] = {k: combined[k] for k in ("phases", "db", "while_suspended")}
        result["prepare_calls"] = combined["prepare_calls"]
        result["repetitions"] = combined["repetitions"]
        result["peak_rss_mb"] = max(result.get("peak_rss_mb", 0), combined["peak_rss_mb"])
    if args.store != "sqlite" and not args.skip_flat:
        print("resume cost vs history: built with SQL on SQLite only; skipped for", args.store)
    elif not args.skip_flat:
        small, big, events_small, events_big = sizes
        engine = Engine(args.store, args.url, settings)
        result["flat"] = asyncio.run(
            run_flatness(engine, workdir, small=small, big=big, events_small=events_small,
                         events_big=events_big, reps=reps)
        )  # fmt: skip
        result["peak_rss_mb_with_flat"] = round(peak_rss_mb(), 1)
    result["config"]["loadavg_at_end"] = [round(x, 2) for x in os.getloadavg()]
    return save_and_report(out, result, report)


if __name__ == "__main__":
    sys.exit(main())
