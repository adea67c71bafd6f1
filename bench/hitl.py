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
import json
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
from collections.abc import Callable, Iterator, Sequence
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any, Protocol
from urllib.parse import urlsplit, urlunsplit

import pyworkflow
from pyworkflow import (
    delete_step_checkpoint,
    load_step_checkpoint,
    save_step_checkpoint,
    step,
    step_hook,
    workflow,
)

HITL = "bench.hitl"
PLAIN = "bench.plain"
RESULTS_DIR = Path(__file__).resolve().parent / "results"

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


# -- looking at the store from outside the engine -------------------------------------------------


class Observer(Protocol):
    """A separate connection to the store: counts and sizes come from here, never from memory."""

    def count(self, workflow: str, status: str) -> int: ...
    def count_status(self, status: str) -> int: ...
    def results(self, workflow: str) -> list[Any]: ...
    def size_bytes(self) -> int: ...
    def clone_suspended(self, run_ids: Sequence[str], copies: int) -> float: ...
    def pad_events(self, run_id: str, total: int) -> int: ...
    def close(self) -> None: ...


class SQLiteObserver:
    def __init__(self, path: str) -> None:
        self.path = path
        self.conn = sqlite3.connect(path, isolation_level=None, timeout=60)
        self.conn.execute("PRAGMA busy_timeout = 60000")

    def count(self, workflow: str, status: str) -> int:
        sql = "SELECT COUNT(*) FROM runs WHERE status = ? AND workflow = ?"
        return int(self.conn.execute(sql, (status, workflow)).fetchone()[0])

    def count_status(self, status: str) -> int:
        """Cheap enough to poll: answered from the (status, created_at) index alone."""
        return int(self.conn.execute("SELECT COUNT(*) FROM runs WHERE status = ?", (status,)).fetchone()[0])

    def results(self, workflow: str) -> list[Any]:
        sql = "SELECT result FROM runs WHERE workflow = ? AND status = 'completed'"
        return [json.loads(r[0]) for r in self.conn.execute(sql, (workflow,))]

    def size_bytes(self) -> int:
        """Database file plus WAL, after a checkpoint that moves the WAL into the file (retried while
        the engine's writer is busy)."""
        for _ in range(100):
            busy, _, _ = self.conn.execute("PRAGMA wal_checkpoint(TRUNCATE)").fetchone()
            if not busy:
                break
            time.sleep(0.02)
        wal = Path(self.path + "-wal")
        return os.path.getsize(self.path) + (wal.stat().st_size if wal.exists() else 0)

    def clone_suspended(self, run_ids: Sequence[str], copies: int) -> float:
        """Copy every row of the given (suspended) runs ``copies`` times under new ids, with fresh
        token digests, in one transaction of this separate connection. Returns seconds taken."""
        started = time.perf_counter()
        c = self.conn
        c.execute("CREATE TEMP TABLE IF NOT EXISTS bench_src (id TEXT PRIMARY KEY)")
        c.execute("CREATE TEMP TABLE IF NOT EXISTS bench_k (n INTEGER PRIMARY KEY)")
        c.execute("BEGIN IMMEDIATE")
        try:
            c.execute("DELETE FROM bench_src")
            c.execute("DELETE FROM bench_k")
            c.executemany("INSERT INTO bench_src (id) VALUES (?)", [(r,) for r in run_ids])
            base = int(c.execute("SELECT COUNT(*) FROM runs WHERE id LIKE '%~c%'").fetchone()[0])
            c.executemany("INSERT INTO bench_k (n) VALUES (?)", [(base + k,) for k in range(copies)])
            sfx = "'~c' || k.n"
            c.execute(f"""INSERT INTO runs (id, workflow, status, input, result, error, created_at,
                updated_at, finished_at) SELECT r.id || {sfx}, r.workflow, r.status, r.input, r.result,
                r.error, r.created_at, r.updated_at, r.finished_at
                FROM runs r JOIN bench_src s ON s.id = r.id CROSS JOIN bench_k k""")
            c.execute(f"""INSERT INTO events (run_id, seq, at, type, key, data)
                SELECT e.run_id || {sfx}, e.seq, e.at, e.type, e.key, e.data
                FROM events e JOIN bench_src s ON s.id = e.run_id CROSS JOIN bench_k k""")
            c.execute(f"""INSERT INTO steps (run_id, step_key, status, attempt, result, error, delivered,
                updated_at) SELECT t.run_id || {sfx}, t.step_key, t.status, t.attempt, t.result, t.error,
                t.delivered, t.updated_at
                FROM steps t JOIN bench_src s ON s.id = t.run_id CROSS JOIN bench_k k""")
            c.execute(f"""INSERT INTO waits (id, run_id, wait_key, kind, name, step_key, token_digest, status,
                notified, created_at, expires_at, resolved_at, payload, payload_schema)
                SELECT w.id || {sfx}, w.run_id || {sfx}, w.wait_key, w.kind, w.name, w.step_key,
                randomblob(32), w.status, w.notified, w.created_at, w.expires_at, w.resolved_at, w.payload,
                w.payload_schema FROM waits w JOIN bench_src s ON s.id = w.run_id CROSS JOIN bench_k k""")
            c.execute(f"""INSERT INTO checkpoints (run_id, scope, name, value, revision, updated_at)
                SELECT p.run_id || {sfx}, p.scope, p.name, p.value, p.revision, p.updated_at
                FROM checkpoints p JOIN bench_src s ON s.id = p.run_id CROSS JOIN bench_k k""")
            c.execute("COMMIT")
        except BaseException:
            c.execute("ROLLBACK")
            raise
        return time.perf_counter() - started

    def pad_events(self, run_id: str, total: int) -> int:
        """Append filler history (``checkpoint_saved`` events of the suspended step, as if it had
        saved its checkpoint many times) until the run has ``total`` events. Returns the count."""
        c = self.conn
        c.execute("BEGIN IMMEDIATE")
        try:
            last = int(
                c.execute("SELECT COALESCE(MAX(seq), 0) FROM events WHERE run_id = ?", (run_id,)).fetchone()[
                    0
                ]
            )
            at = time.time()
            rows = [
                (run_id, last + k, at, "checkpoint_saved", "review#1", None)
                for k in range(1, total - last + 1)
            ]
            c.executemany(
                "INSERT INTO events (run_id, seq, at, type, key, data) VALUES (?, ?, ?, ?, ?, ?)", rows
            )
            c.execute("COMMIT")
        except BaseException:
            c.execute("ROLLBACK")
            raise
        return int(c.execute("SELECT COUNT(*) FROM events WHERE run_id = ?", (run_id,)).fetchone()[0])

    def close(self) -> None:
        self.conn.close()


class PostgresObserver:
    """The same observations on PostgreSQL (for the second backend; its schema mirrors SQLite's)."""

    def __init__(self, url: str) -> None:
        import psycopg

        self.conn = psycopg.connect(url, autocommit=True)

    def count(self, workflow: str, status: str) -> int:
        sql = "SELECT COUNT(*) FROM runs WHERE status = %s AND workflow = %s"
        row = self.conn.execute(sql, (status, workflow)).fetchone()
        return int(row[0]) if row else 0

    def count_status(self, status: str) -> int:
        row = self.conn.execute("SELECT COUNT(*) FROM runs WHERE status = %s", (status,)).fetchone()
        return int(row[0]) if row else 0

    def results(self, workflow: str) -> list[Any]:
        sql = "SELECT result FROM runs WHERE workflow = %s AND status = 'completed'"
        return [json.loads(bytes(r[0])) for r in self.conn.execute(sql, (workflow,))]

    def size_bytes(self) -> int:
        sql = """SELECT COALESCE(SUM(pg_total_relation_size(c.oid)), 0) FROM pg_class c
                 JOIN pg_namespace n ON n.oid = c.relnamespace
                 WHERE n.nspname = current_schema() AND c.relkind = 'r'"""
        row = self.conn.execute(sql).fetchone()
        return int(row[0]) if row else 0

    def clone_suspended(self, run_ids: Sequence[str], copies: int) -> float:
        raise NotImplementedError("cloning history is implemented for SQLite only; use --skip-flat")

    def pad_events(self, run_id: str, total: int) -> int:
        raise NotImplementedError("padding history is implemented for SQLite only; use --skip-flat")

    def close(self) -> None:
        self.conn.close()


# -- helpers --------------------------------------------------------------------------------------


async def until(check: Callable[[], bool], *, what: str, timeout: float, interval: float = 0.01) -> None:
    deadline = time.monotonic() + timeout
    while not check():
        if time.monotonic() > deadline:
            raise TimeoutError(f"timed out after {timeout} s waiting for {what}")
        await asyncio.sleep(interval)


def peak_rss_mb() -> float:
    return resource.getrusage(resource.RUSAGE_SELF).ru_maxrss / 1024  # KiB on Linux


def commits() -> int | None:
    db = getattr(pyworkflow.get_store(), "db", None)
    value = getattr(db, "commits", None)
    return int(value) if isinstance(value, int) else None


def per_run(delta: int | None, n: int) -> float | None:
    return None if delta is None else round(delta / n, 3)


@dataclass
class Phase:
    name: str
    runs: int
    seconds: float
    commits: int | None
    cpu: dict[str, float]

    def as_dict(self) -> dict[str, Any]:
        return {
            "runs": self.runs,
            "seconds": round(self.seconds, 4),
            "runs_per_s": round(self.runs / self.seconds, 1),
            "commits": self.commits,
            "commits_per_run": per_run(self.commits, self.runs),
            # CPU time per run (less sensitive to a busy machine than the wall clock): the whole
            # process, the event loop's thread, and the SQLite writer thread.
            **{f"{k}_cpu_ms_per_run": round(v * 1000 / self.runs, 4) for k, v in self.cpu.items()},
        }


def writer_cpu_seconds() -> float:
    """CPU time of the SQLite writer thread, from /proc (0 where that is not available)."""
    for t in threading.enumerate():
        if t.name.startswith("sqlite-writer") and t.native_id is not None:
            try:
                fields = Path(f"/proc/self/task/{t.native_id}/stat").read_text().rsplit(")", 1)[1].split()
            except OSError:
                return 0.0
            return (int(fields[11]) + int(fields[12])) / os.sysconf("SC_CLK_TCK")
    return 0.0


def cpu_now() -> dict[str, float]:
    return {"process": time.process_time(), "main": time.thread_time(), "writer": writer_cpu_seconds()}


async def timed_phase(
    name: str, n: int, work: Callable[[], Any], done: Callable[[], bool], timeout: float
) -> Phase:
    before, cpu_before = commits(), cpu_now()
    started = time.perf_counter()
    await work()
    await until(done, what=f"phase {name}", timeout=timeout)
    seconds = time.perf_counter() - started
    cpu = {k: v - cpu_before[k] for k, v in cpu_now().items()}
    after = commits()
    delta = None if before is None or after is None else after - before
    return Phase(name, n, seconds, delta, cpu)


def storage_url(store: str, path: Path, url: str | None) -> str:
    if store == "sqlite":
        return f"sqlite:///{path}"
    if not url:
        raise SystemExit("--store postgresql needs --url postgresql://... (or $PYWORKFLOW_TEST_PG)")
    return url


@contextlib.contextmanager
def fresh_database(store: str, admin_url: str | None, label: str) -> Iterator[str | None]:
    """For PostgreSQL, a new empty database (created through ``admin_url``, dropped afterwards);
    for SQLite nothing (every phase uses a new file)."""
    if store == "sqlite":
        yield None
        return
    if not admin_url:
        raise SystemExit("--store postgresql needs --url postgresql://... (or $PYWORKFLOW_TEST_PG)")
    import psycopg

    name = f"pwbench_{label}_{os.getpid()}_{int(time.time())}"
    parts = urlsplit(admin_url)
    with psycopg.connect(admin_url, autocommit=True) as conn:
        conn.execute(f'CREATE DATABASE "{name}"')
    try:
        yield urlunsplit((parts.scheme, parts.netloc, f"/{name}", parts.query, parts.fragment))
    finally:
        with psycopg.connect(admin_url, autocommit=True) as conn:
            conn.execute(f'DROP DATABASE IF EXISTS "{name}" WITH (FORCE)')


def make_observer(store: str, path: Path, url: str | None) -> Observer:
    if store == "sqlite":
        return SQLiteObserver(str(path))
    assert url is not None
    return PostgresObserver(url)


# -- the three phases -----------------------------------------------------------------------------


async def run_phases(n: int, store: str, path: Path, url: str | None, synchronous: str) -> dict[str, Any]:
    pyworkflow.configure(storage=storage_url(store, path, url), synchronous=synchronous)
    pyworkflow.get_store()  # opens (and migrates) the database before the observer connects
    obs = make_observer(store, path, url)
    timeout = max(120.0, n / 10)
    try:
        # Warm-up: one plain run starts the runtime (its loop and heartbeat tasks, the writer thread).
        warm = await pyworkflow.start(plain, -1)
        await pyworkflow.wait_for_run(warm, 30)
        idle_threads, idle_tasks = threading.active_count(), len(asyncio.all_tasks())

        COUNTERS.prepare_calls = 0
        COUNTERS.tokens.clear()

        async def start_all() -> None:
            await asyncio.gather(*(pyworkflow.start(hitl, i) for i in range(n)))

        # Each phase ends when the store holds its N runs in the target status (polled through the
        # observer's own connection; the warm-up run is the one completed run before phase B).
        target = obs.count_status("suspended") + n
        a = await timed_phase("A", n, start_all, lambda: obs.count_status("suspended") >= target, timeout)
        # Turns end just after their suspension commits; let them finish (up to 2 s), then count.
        deadline = time.monotonic() + 2
        while len(asyncio.all_tasks()) > idle_tasks and time.monotonic() < deadline:
            await asyncio.sleep(0.01)
        suspended_threads, suspended_tasks = threading.active_count(), len(asyncio.all_tasks())
        still_suspended = obs.count(HITL, "suspended")
        if len(COUNTERS.tokens) != n:
            raise RuntimeError(f"phase A: {len(COUNTERS.tokens)} tokens delivered, expected {n}")

        async def resume_all() -> None:
            await asyncio.gather(
                *(pyworkflow.resume_hook(COUNTERS.tokens[i], payload_for(i)) for i in range(n))
            )

        target = obs.count_status("completed") + n
        b = await timed_phase("B", n, resume_all, lambda: obs.count_status("completed") >= target, timeout)
        results = obs.results(HITL)
        wrong = [r for r in results if r.get("feedback") != payload_for(r["i"])]
        if len(results) != n or wrong:
            raise RuntimeError(f"phase B: {len(results)} results, {len(wrong)} without their own payload")
        if COUNTERS.prepare_calls != n:
            raise RuntimeError(f"phase B: prepare ran {COUNTERS.prepare_calls} times for {n} runs")
        hitl_bytes = obs.size_bytes()

        async def start_plain() -> None:
            await asyncio.gather(*(pyworkflow.start(plain, i) for i in range(n)))

        target = obs.count_status("completed") + n
        c = await timed_phase("C", n, start_plain, lambda: obs.count_status("completed") >= target, timeout)
        if obs.count(PLAIN, "completed") != n + 1:
            raise RuntimeError(
                f"phase C: {obs.count(PLAIN, 'completed')} plain runs completed, expected {n + 1}"
            )
        total_bytes = obs.size_bytes()
        completed = obs.count(HITL, "completed") + obs.count(PLAIN, "completed")
        return {
            "phases": {p.name: p.as_dict() for p in (a, b, c)},
            "prepare_calls": COUNTERS.prepare_calls,
            "peak_rss_mb": round(peak_rss_mb(), 1),
            "db": {
                "bytes_total": total_bytes,
                "completed_runs": completed,
                "bytes_per_completed_run": round(total_bytes / completed),
                "bytes_after_phase_b": hitl_bytes,
                "bytes_per_hitl_run": round(hitl_bytes / (n + 1)),
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


def combine(rounds: list[dict[str, Any]]) -> dict[str, Any]:
    """Medians over repetitions of phases A-C (every figure separately), with the samples."""
    combined = dict(rounds[-1])
    phases: dict[str, Any] = {}
    for name in rounds[0]["phases"]:
        samples = [r["phases"][name] for r in rounds]
        merged: dict[str, Any] = {}
        for key, value in samples[0].items():
            values = [x[key] for x in samples]
            merged[key] = value if value is None else statistics.median(values)
        merged["runs_per_s_samples"] = [x["runs_per_s"] for x in samples]
        phases[name] = merged
    combined["phases"] = phases
    combined["repetitions"] = len(rounds)
    combined["peak_rss_mb"] = max(r["peak_rss_mb"] for r in rounds)
    for key in ("bytes_per_completed_run", "bytes_per_hitl_run", "bytes_per_plain_run"):
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
    synchronous: str

    async def open(self, path: Path, prober: Prober) -> Observer:
        pyworkflow.configure(storage=storage_url(self.store, path, self.url), synchronous=self.synchronous)
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


def report(result: dict[str, Any]) -> None:
    cfg = result["config"]
    store = (
        f"sqlite (synchronous={cfg['synchronous']}, SQLite {cfg['sqlite']})"
        if cfg["store"] == "sqlite"
        else cfg["store"]
    )
    print(f"HITL benchmark: N={cfg['n']}, store={store}, {cfg['cpus']} CPUs, Python {cfg['python']}")
    labels = {"A": "start+suspend", "B": "resume+complete", "C": "plain (3 steps)"}
    for name, p in result["phases"].items():
        ok = "ok" if p["runs_per_s"] >= TARGET_RUNS_PER_S else "UNDER TARGET"
        cpr = "" if p["commits_per_run"] is None else f", {p['commits_per_run']:.3f} commits/run"
        runs = ", ".join(f"{x:.0f}" for x in p["runs_per_s_samples"])
        rate = f"{p['runs_per_s']:>9.1f} runs/s median of [{runs}]  ({p['seconds']:.3f} s{cpr})"
        print(f"  phase {name} {labels[name]:<16} {rate}  [target {TARGET_RUNS_PER_S:.0f}: {ok}]")
    cpu = "; ".join(
        f"{name} {p['process_cpu_ms_per_run']:.3f} (loop thread {p['main_cpu_ms_per_run']:.3f}, "
        f"writer {p['writer_cpu_ms_per_run']:.3f})"
        for name, p in result["phases"].items()
    )
    print(f"  CPU ms per run: {cpu}")
    load = f"{cfg['loadavg_at_start'][0]} / {cfg['loadavg_at_end'][0]}"
    print(f"  load average (1 min) at start/end: {load} on {cfg['cpus']} CPUs; "
          f"repetitions of A-C: {result['repetitions']} (fresh file each)")  # fmt: skip
    db = result["db"]
    ok = "ok" if db["bytes_per_completed_run"] <= TARGET_BYTES_PER_RUN else "OVER TARGET"
    print(f"  database: {db['bytes_per_completed_run']} bytes per completed run "
          f"({db['bytes_total']} bytes / {db['completed_runs']} runs; hitl {db['bytes_per_hitl_run']}, "
          f"plain {db['bytes_per_plain_run']}) [target {TARGET_BYTES_PER_RUN}: {ok}]")  # fmt: skip
    w = result["while_suspended"]
    print(f"  while {w['suspended_runs']} runs suspended: {w['threads']} threads (idle {w['threads_idle']}), "
          f"{w['tasks']} asyncio tasks (idle {w['tasks_idle']}); per waiting run: "
          f"{w['threads_per_waiting_run']:g} threads, {w['tasks_per_waiting_run']:g} tasks")  # fmt: skip
    print(f"  peak RSS: {result['peak_rss_mb']} MB; prepare calls: {result['prepare_calls']}")
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
    parser.add_argument("--synchronous", default="FULL", help="SQLite synchronous (default FULL)")
    parser.add_argument("--quick", action="store_true", help="N=200 and a small history: a smoke run")
    parser.add_argument("--repeat", type=int, default=None, help="repetitions of phases A-C (default 3)")
    parser.add_argument("--reps", type=int, default=None, help="repetitions per resume-latency figure")
    parser.add_argument("--skip-flat", action="store_true", help="skip the resume-cost-vs-history part")
    parser.add_argument("--dir", type=Path, default=None, help="where the fresh database files go")
    parser.add_argument("--out", type=Path, default=None, help="JSON output file")
    return parser.parse_args(argv)


def main(argv: Sequence[str] | None = None) -> int:
    args = parse_args(argv)
    n = args.n or (200 if args.quick else 2000)
    reps = args.reps or (5 if args.quick else 15)
    sizes = (100, 1_000, 100, 1_000) if args.quick else (1_000, 100_000, 1_000, 10_000)
    workdir = args.dir or Path(tempfile.mkdtemp(prefix="pyworkflow-bench-"))
    workdir.mkdir(parents=True, exist_ok=True)
    suffix = "-quick" if args.quick else ""
    out = args.out or RESULTS_DIR / f"hitl-{args.store}{suffix}.json"
    result: dict[str, Any] = {
        "config": {
            "n": n,
            "store": args.store,
            "synchronous": args.synchronous.upper(),
            "quick": args.quick,
            "command": " ".join([Path(sys.executable).name, "-m", "bench.hitl", *(argv or sys.argv[1:])]),
            "python": platform.python_version(),
            "sqlite": sqlite3.sqlite_version,
            "cpus": os.cpu_count(),
            "platform": platform.platform(),
            "date_utc": time.strftime("%Y-%m-%dT%H:%M:%SZ", time.gmtime()),
            "loadavg_at_start": [round(x, 2) for x in os.getloadavg()],
            "database_dir": str(workdir),
        },
        "targets": {
            "runs_per_s": TARGET_RUNS_PER_S,
            "bytes_per_completed_run": TARGET_BYTES_PER_RUN,
            "flat_ratio": TARGET_FLAT_RATIO,
        },
    }
    repeat = args.repeat or (1 if args.quick else 3)
    rounds = []
    for k in range(repeat):  # each repetition on a fresh database (file)
        db = workdir / f"hitl-{k + 1}.db"
        with fresh_database(args.store, args.url, f"r{k + 1}") as url:
            rounds.append(asyncio.run(run_phases(n, args.store, db, url, args.synchronous)))
    result.update(combine(rounds))
    if args.store != "sqlite" and not args.skip_flat:
        print("resume cost vs history: built with SQL on SQLite only; skipped for", args.store)
    elif not args.skip_flat:
        small, big, events_small, events_big = sizes
        engine = Engine(args.store, args.url, args.synchronous)
        result["flat"] = asyncio.run(
            run_flatness(engine, workdir, small=small, big=big, events_small=events_small,
                         events_big=events_big, reps=reps)
        )  # fmt: skip
        result["peak_rss_mb_with_flat"] = round(peak_rss_mb(), 1)
    result["config"]["loadavg_at_end"] = [round(x, 2) for x in os.getloadavg()]
    result["out"] = str(out)
    out.parent.mkdir(parents=True, exist_ok=True)
    out.write_text(json.dumps(result, indent=2) + "\n")
    report(result)
    return 0


if __name__ == "__main__":
    sys.exit(main())
