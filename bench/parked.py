"""A million waiting runs (issue 14, item 3): what parking N runs costs and what stays flat.

    .venv/bin/python -m bench.parked [--n 1000000] [--probes 1000] [--deadlines 1000] [--dir DIR]
    .venv/bin/python -m bench.parked --store postgresql [--url postgresql://postgres@127.0.0.1:5432/postgres]

Workload (pyworkflow's local runtime; SQLite, ``synchronous=FULL``, or a new database on the
PostgreSQL server at ``--url``, created and dropped by the benchmark): a run of ``bench.parked`` is one
step that saves a ~200-byte checkpoint and waits on a ``step_hook``; every other run (odd ``i``)
has a deadline, spread uniformly between one hour and 25 hours from when it parked (so none falls
due while the benchmark runs). Runs are parked in batches of ``--batch`` concurrent ``start`` calls.

Measured, each on the database of N parked runs ("big") and, where a ratio is asked for, on one of
1,000 parked runs ("small") built the same way:

* parking: seconds and runs/s (on a PostgreSQL server without autovacuum, then ``VACUUM ANALYZE``
  as autovacuum would have run by then); database bytes per waiting run (SQLite: file + WAL after a
  checkpoint; PostgreSQL: its tables with their indexes and TOAST, as parked, dead rows included;
  less the empty database), target at most 2 KB;
* resume+complete of ``--probes`` runs picked at random among the parked ones, one at a time
  (``resume_hook`` until the run is completed), p50/p99/p99.9/max, big against small, target p99
  within 1.5x;
  the two databases are alternated in blocks (each block reopens its database and warms up first);
* lateness of ``--deadlines`` deadlines falling due at the same moment among the N parked runs
  (``on_timeout="return"``: from the deadline until the resumed step sees ``STEP_HOOK_TIMEOUT``),
  p50/p99/max, target p99 under 1 s;
* restart: a new process opens the database, starts the runtime and resumes one parked run:
  seconds until the runtime serves, until that run completed, and the process's RSS then, big
  against small (flat in the number parked);
* the inbox's first page through the store read the review console uses
  (``atfgraph.server.GraphStore.console_inbox``, 50 waits) and its pending counts (each kind's
  counted up to the console's cap, ``COUNT_CAP`` + 1, shown as "10,000+"), median of 20,
  target under 50 ms (last: opening the graph store adds atfgraph's tables to the file).

Figures are printed and written as JSON to ``bench/results/parked-<store>.json`` (or ``--out``).
"""

from __future__ import annotations

import argparse
import asyncio
import contextlib
import json
import os
import platform
import random
import resource
import sqlite3
import statistics
import subprocess
import sys
import tempfile
import time
from collections.abc import Sequence
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

import pyworkflow
from pyworkflow import (
    STEP_HOOK_TIMEOUT,
    load_step_checkpoint,
    save_step_checkpoint,
    step,
    step_hook,
    workflow,
)
from pyworkflow.store import sqlite_url

from ._machine import describe
from ._observers import (
    RESULTS_DIR,
    Observer,
    PostgresObserver,
    SQLiteObserver,
    add_store_arguments,
    fresh_database,
    save_and_report,
)

PARKED = "bench.parked"
TARGET_BYTES_PER_WAITING_RUN = 2048
TARGET_P99_RATIO = 1.5
TARGET_LATENESS_P99_S = 1.0
TARGET_INBOX_MS = 50.0
SMALL = 1_000
WARMUPS = 10
_PAD = "c" * 160  # the serialized checkpoint is ~200 bytes
DAY = 86_400.0


@dataclass
class Marks:
    """What the runs report to this process: tokens of the runs it will resume, and lateness."""

    want: set[int] = field(default_factory=set)
    tokens: dict[int, str] = field(default_factory=dict)
    late: dict[int, float] = field(default_factory=dict)


MARKS = Marks()


@step
async def ask(i: int, deadline: float | None) -> dict[str, Any]:
    if await load_step_checkpoint() is None:
        await save_step_checkpoint({"i": i, "stage": "asked", "notes": _PAD})

    def notify(token: str) -> None:
        if i in MARKS.want:
            MARKS.tokens[i] = token

    # Re-executed after the deadline the wait exists already: the timeout is not used again.
    timeout = None if deadline is None else max(0.001, deadline - time.time())
    answer = await step_hook("answer", timeout=timeout, on_created=notify, on_timeout="return")
    if answer is STEP_HOOK_TIMEOUT:
        assert deadline is not None
        MARKS.late[i] = time.time() - deadline
        return {"i": i, "timed_out": True}
    return {"i": i, "answer": answer}


@workflow(name=PARKED)
async def parked(i: int, deadline: float | None) -> dict[str, Any]:
    return await ask(i, deadline)


@step
async def hello() -> str:
    return "hello"


@workflow(name="bench.parked_warm")
async def warm_up() -> str:
    """One plain run: starts this process's runtime (then serving the parked runs) and shows it serves."""
    return await hello()


async def serve_now() -> None:
    run = await pyworkflow.wait_for_run(await pyworkflow.start(warm_up), 120)
    if run.status != "completed":
        raise RuntimeError(f"warm-up run: {run.status}")


def deadline_of(i: int, now: float, rng: random.Random) -> float | None:
    """Every other run waits with a deadline between 1 h and 25 h from now."""
    return None if i % 2 == 0 else now + 3600 + rng.random() * DAY


def configure(storage: str, poll_interval: float) -> None:
    pyworkflow.configure(storage=storage, poll_interval=poll_interval)


def observer(storage: str) -> Observer:
    """A connection of its own to the benchmark's database (``sqlite:///path`` or a PostgreSQL URL)."""
    if storage.startswith("sqlite:///"):
        return SQLiteObserver(storage.removeprefix("sqlite:///"))
    return PostgresObserver(storage)


async def park(storage: str, n: int, batch: int, want: set[int], poll_interval: float) -> dict[str, Any]:
    """A fresh database with ``n`` parked runs; tokens kept for ``want``. Returns the figures and
    the run ids of ``want``."""
    configure(storage, poll_interval)
    pyworkflow.get_store()
    obs = observer(storage)
    MARKS.want = set(want)
    MARKS.tokens = {}
    rng = random.Random(n)
    try:
        empty = obs.size_bytes()
        ids: dict[int, str] = {}
        started = time.perf_counter()
        for first in range(0, n, batch):
            now = time.time()
            chunk = range(first, min(n, first + batch))
            made = await asyncio.gather(
                *(pyworkflow.start(parked, i, deadline_of(i, now, rng)) for i in chunk)
            )
            ids.update((i, r) for i, r in zip(chunk, made, strict=True) if i in want)
            if first // batch % 50 == 0:
                print(f"  parking: {first + len(chunk)}/{n} started", file=sys.stderr, flush=True)
        while obs.count_status("suspended") < n:
            await asyncio.sleep(0.2)
        seconds = time.perf_counter() - started
        await pyworkflow.get_store().database.check_writable()  # the last turns' ends
        size = obs.size_bytes()
        missing = want - set(MARKS.tokens)
        if missing:
            raise RuntimeError(f"{len(missing)} runs to resume delivered no token")
        vacuumed = None if storage.startswith("sqlite:///") else vacuum_if_no_autovacuum(storage)
        return {
            "runs": n,
            "seconds": round(seconds, 2),
            "runs_per_s": round(n / seconds, 1),
            "bytes_empty": empty,
            "bytes": size,
            "bytes_per_waiting_run": round((size - empty) / n),
            "run_ids": ids,
            "tokens": MARKS.tokens,
            **({} if vacuumed is None else {"vacuumed_by_the_benchmark": vacuumed}),
        }
    finally:
        await pyworkflow.shutdown()
        obs.close()


def pick(n: int, count: int, seed: int) -> list[int]:
    return random.Random(seed).sample(range(n), min(count, n))


def quantiles(samples: list[float]) -> dict[str, Any]:
    ordered = sorted(samples)
    p99 = ordered[min(len(ordered) - 1, round(0.99 * (len(ordered) - 1)))]
    p999 = ordered[min(len(ordered) - 1, round(0.999 * (len(ordered) - 1)))]
    return {
        "p50": round(float(statistics.median(ordered)), 4),
        "p99": round(float(p99), 4),
        "p99.9": round(float(p999), 4),
        "max": round(float(ordered[-1]), 4),
        "count": len(ordered),
    }


async def resume_block(storage: str, run_ids: dict[int, str], tokens: dict[int, str], warm: list[int],
                       probes: list[int], poll_interval: float) -> list[float]:  # fmt: skip
    """Open the database, resume ``warm`` (not counted) then ``probes`` one at a time; ms each."""
    configure(storage, poll_interval)
    try:
        await serve_now()
        out = []
        for k, i in enumerate([*warm, *probes]):
            started = time.perf_counter()
            await pyworkflow.resume_hook(tokens[i], {"ok": True, "i": i})
            run = await pyworkflow.wait_for_run(run_ids[i], 60)
            elapsed = (time.perf_counter() - started) * 1000
            if run.status != "completed" or run.result != {"i": i, "answer": {"ok": True, "i": i}}:
                raise RuntimeError(f"run {run_ids[i]}: {run.status} {run.result!r}")
            if k >= len(warm):
                out.append(elapsed)
        return out
    finally:
        await pyworkflow.shutdown()


async def deadlines_together(
    storage: str, count: int, poll_interval: float, margin: float = 15.0
) -> dict[str, Any]:
    """``count`` more runs whose deadlines fall due at one moment, among the parked runs."""
    configure(storage, poll_interval)
    obs = observer(storage)
    MARKS.late.clear()
    base = 50_000_000
    try:
        await serve_now()
        completed_before = obs.count_status("completed")
        # Time enough to park them all first (about 1 s per 1,000 on a quiet machine).
        due = time.time() + margin + count / 100
        await asyncio.gather(*(pyworkflow.start(parked, base + k, due) for k in range(count)))
        await pyworkflow.get_store().database.check_writable()
        parked_at = time.time()
        if parked_at >= due:
            raise RuntimeError("parking the deadline runs took past their deadline; raise the margin")
        deadline = time.monotonic() + (due - time.time()) + 120
        while obs.count_status("completed") < completed_before + count:
            if time.monotonic() > deadline:
                raise TimeoutError("the deadline runs did not all resume within 120 s of their deadline")
            await asyncio.sleep(0.05)
        late = list(MARKS.late.values())
        if len(late) != count:
            raise RuntimeError(f"{len(late)} of {count} deadline runs saw their timeout")
        return {
            "runs": count,
            "parked_before_due_s": round(due - parked_at, 2),
            "lateness_s": quantiles(late),
        }
    finally:
        await pyworkflow.shutdown()
        obs.close()


RESTART_PROBE = """
import asyncio, json, sys, time
t0 = time.perf_counter()
import pyworkflow
from bench import parked as mod
async def main():
    storage, token, run_id = sys.argv[1:4]
    pyworkflow.configure(storage=storage)
    pyworkflow.get_store()
    opened = time.perf_counter()
    await mod.serve_now()  # a new run started and completed: the runtime serves
    serving = time.perf_counter()
    await pyworkflow.resume_hook(token, {"ok": True})
    run = await pyworkflow.wait_for_run(run_id, 60)
    done = time.perf_counter()
    await asyncio.sleep(1.0)  # a few ticks of the runtime's loop with N runs parked
    rss = int(open("/proc/self/status").read().split("VmRSS:")[1].split()[0])
    await pyworkflow.shutdown()
    # VmRSS, not ru_maxrss: Linux keeps the parent's peak across fork and exec.
    print(json.dumps({"status": run.status, "open_s": opened - t0, "serving_s": serving - t0,
                      "first_resume_done_s": done - t0, "rss_kib": rss}))
asyncio.run(main())
"""


def restart(storage: str, token: str, run_id: str) -> dict[str, Any]:
    """A new process on the database: until it serves, until one resume completed, its RSS."""
    root = Path(__file__).resolve().parents[1]
    started = time.perf_counter()
    proc = subprocess.run(
        [sys.executable, "-c", RESTART_PROBE, storage, token, run_id],
        cwd=root,
        capture_output=True,
        text=True,
        timeout=600,
    )
    wall = time.perf_counter() - started
    if proc.returncode != 0:
        raise RuntimeError(f"restart probe failed: {proc.stderr[-2000:]}")
    out: dict[str, Any] = json.loads(proc.stdout.strip().splitlines()[-1])
    if out["status"] != "completed":
        raise RuntimeError(f"restart probe: run {run_id} is {out['status']}")
    out = {k: round(v, 3) if isinstance(v, float) else v for k, v in out.items()}
    out["process_wall_s"] = round(wall, 3)
    return out


def inbox(storage: str) -> dict[str, Any]:
    """The console's inbox page read (first page, 50 waits) and its counts, median of 20."""
    # The graph server's own store class (not a public name): the console's inbox read itself.
    from atfgraph.server._console_reads import COUNT_CAP
    from atfgraph.server._store import GraphStore

    started = time.perf_counter()
    store = GraphStore(storage.removeprefix("sqlite:///"))
    opened = time.perf_counter() - started
    try:
        kinds = ("approval", "hook", "step_hook")
        page_ms, count_ms = [], []
        items: list[Any] = []
        counts: dict[str, int] = {}
        for _ in range(20):
            t = time.perf_counter()
            items = store.console_inbox(kinds, None, None, 50).items
            page_ms.append((time.perf_counter() - t) * 1000)
            t = time.perf_counter()
            counts = store.console_inbox_counts()
            count_ms.append((time.perf_counter() - t) * 1000)
        return {
            "graph_store_open_s": round(opened, 2),
            "first_page_items": len(items),
            "first_page_ms_median": round(statistics.median(page_ms), 3),
            "counts": counts,
            "counts_stop_at": COUNT_CAP + 1,
            "counts_ms_median": round(statistics.median(count_ms), 3),
        }
    finally:
        store.close()


def _shown(storage: str) -> str:
    """A storage URL without its password, for the output."""
    head, at, tail = storage.rpartition("@")
    if not at or "://" not in head:
        return storage
    scheme, _, user = head.partition("://")
    return f"{scheme}://{user.split(':', 1)[0]}@{tail}"


def peak_rss_mb() -> float:
    return round(resource.getrusage(resource.RUSAGE_SELF).ru_maxrss / 1024, 1)


async def run(args: argparse.Namespace, workdir: Path) -> dict[str, Any]:
    with contextlib.ExitStack() as stack:
        if args.store == "sqlite":
            big_db, small_db = workdir / "parked-big.db", workdir / "parked-small.db"
            for old in (big_db, small_db):  # every figure is of a fresh file
                for suffix in ("", "-wal", "-shm"):
                    Path(f"{old}{suffix}").unlink(missing_ok=True)
            big_url, small_url = sqlite_url(big_db), sqlite_url(small_db)
        else:  # two new databases on the server, dropped at the end
            big_new = stack.enter_context(fresh_database("postgresql", args.url, "parked_big"))
            small_new = stack.enter_context(fresh_database("postgresql", args.url, "parked_small"))
            assert big_new is not None and small_new is not None
            big_url, small_url = big_new, small_new
        return await measure(args, big_url, small_url)


async def measure(args: argparse.Namespace, big_db: str, small_db: str) -> dict[str, Any]:
    n, probes_n = args.n, args.probes
    # Runs to resume: random ones among the parked, the warm-ups of each block, one for each restart.
    blocks = args.blocks
    per_block = max(1, probes_n // blocks)
    big_pick = pick(n, per_block * blocks + WARMUPS * blocks + 1, seed=1)
    if len(big_pick) < per_block * blocks + WARMUPS * blocks + 1:
        raise SystemExit("--n must exceed the runs resumed (probes + warm-ups + 1)")
    resumed = per_block * blocks + WARMUPS * blocks + 1
    small_n = SMALL + resumed
    small_pick = pick(small_n, resumed, seed=2)
    print(f"parking {n} runs in {_shown(big_db)}", file=sys.stderr, flush=True)
    big = await park(big_db, n, args.batch, set(big_pick), args.poll_interval)
    big_ids, big_tokens = big.pop("run_ids"), big.pop("tokens")
    print(f"parking {small_n} runs in {_shown(small_db)}", file=sys.stderr, flush=True)
    small = await park(small_db, small_n, args.batch, set(small_pick), args.poll_interval)
    small_ids, small_tokens = small.pop("run_ids"), small.pop("tokens")
    rss_after_parking = peak_rss_mb()

    print("restart probes", file=sys.stderr, flush=True)
    restarts = {
        "small": restart(small_db, small_tokens[small_pick[-1]], small_ids[small_pick[-1]]),
        "big": restart(big_db, big_tokens[big_pick[-1]], big_ids[big_pick[-1]]),
    }

    print("resume probes, alternating blocks", file=sys.stderr, flush=True)
    few: list[float] = []
    many: list[float] = []
    for b in range(blocks):
        for path, ids, tokens, chosen, out in (
            (small_db, small_ids, small_tokens, small_pick, few),
            (big_db, big_ids, big_tokens, big_pick, many),
        ):
            at = b * (WARMUPS + per_block)
            warm, probes = chosen[at : at + WARMUPS], chosen[at + WARMUPS : at + WARMUPS + per_block]
            out.extend(await resume_block(path, ids, tokens, warm, probes, args.poll_interval))
    resume = {"small": quantiles(few), "big": quantiles(many)}
    resume["p50_ratio"] = round(resume["big"]["p50"] / resume["small"]["p50"], 3)
    resume["p99_ratio"] = round(resume["big"]["p99"] / resume["small"]["p99"], 3)

    print(f"{args.deadlines} deadlines falling due together", file=sys.stderr, flush=True)
    due = await deadlines_together(big_db, args.deadlines, args.poll_interval, args.deadline_margin)

    print(
        "inbox (opening the graph store migrates atfgraph's tables into the file)",
        file=sys.stderr,
        flush=True,
    )
    result = {
        "parking": {"big": big, "small": small},
        "resume_ms": resume,
        "deadlines": due,
        "restart": restarts,
        "inbox": {"big": inbox(big_db), "small": inbox(small_db)},
        "bench_process_peak_rss_mb": rss_after_parking,
    }
    if not big_db.startswith("sqlite:///"):
        print("live size (VACUUM FULL, last)", file=sys.stderr, flush=True)
        big["live"] = live_size(big_db, big["bytes_empty"])
    return result


def vacuum_if_no_autovacuum(url: str) -> bool:
    """PostgreSQL: what autovacuum would have done by now, where the server runs without it (this
    machine's, like CI servers, does): VACUUM ANALYZE once the runs are parked, so the probes see
    statistics and no dead row versions of parking. Returns whether it ran."""
    import psycopg

    with psycopg.connect(url, autocommit=True) as conn:
        row = conn.execute("SHOW autovacuum").fetchone()
        if row is not None and row[0] == "on":
            return False
        conn.execute("VACUUM ANALYZE")
    return True


def live_size(url: str, empty: int) -> dict[str, Any]:
    """PostgreSQL: the tables' size once rewritten without the dead row versions of the runs'
    updates and the queue's deletions (VACUUM FULL), per run in the database. As parked, those
    versions stay in the files until a vacuum frees their space for later rows (autovacuum, which
    this machine's server runs without); this is what the live rows take."""
    import psycopg

    with psycopg.connect(url, autocommit=True) as conn:
        conn.execute("VACUUM FULL")
        (runs,) = conn.execute("SELECT COUNT(*) FROM runs").fetchone() or (0,)
    obs = PostgresObserver(url)
    try:
        size = obs.size_bytes()
    finally:
        obs.close()
    return {"runs": int(runs), "bytes": size, "bytes_per_run": round((size - empty) / max(1, int(runs)))}


def report(result: dict[str, Any]) -> None:
    cfg = result["config"]
    database = (
        f"SQLite {cfg['sqlite']} synchronous=FULL"
        if cfg.get("store", "sqlite") == "sqlite"
        else f"PostgreSQL {cfg.get('postgresql', '')}"
    )
    print(f"parked-runs benchmark: N={cfg['n']}, {database}, "
          f"{cfg['cpus']} CPUs, "
          f"load {cfg['loadavg_at_start'][0]} -> {cfg['loadavg_at_end'][0]}")  # fmt: skip
    print(f"  settings: {cfg['settings']}")
    big, small = result["parking"]["big"], result["parking"]["small"]
    ok = "ok" if big["bytes_per_waiting_run"] <= TARGET_BYTES_PER_WAITING_RUN else "OVER TARGET"
    print(f"  parking {big['runs']} runs: {big['seconds']} s ({big['runs_per_s']} runs/s); "
          f"{big['bytes_per_waiting_run']} bytes per waiting run "
          f"[target {TARGET_BYTES_PER_WAITING_RUN}: {ok}] "
          f"(small: {small['runs']} runs, {small['bytes_per_waiting_run']} bytes per run)")  # fmt: skip
    if big.get("vacuumed_by_the_benchmark"):
        print("    the server runs without autovacuum: the benchmark ran VACUUM ANALYZE after parking, as "
              "autovacuum would have by then")  # fmt: skip
    if "live" in big:
        live = big["live"]
        ok = "ok" if live["bytes_per_run"] <= TARGET_BYTES_PER_WAITING_RUN else "OVER TARGET"
        print(f"    as parked, with the dead row versions of the runs' updates; live rows only (VACUUM FULL, "
              f"last): {live['bytes_per_run']} bytes per run of {live['runs']} [target "
              f"{TARGET_BYTES_PER_WAITING_RUN}: {ok}]")  # fmt: skip
    r = result["resume_ms"]
    ok = "ok" if r["p99_ratio"] <= TARGET_P99_RATIO else "NOT FLAT"
    print(f"  resume+complete, one at a time: {r['big']['count']} random runs of {big['runs']} parked "
          f"p50 {r['big']['p50']:.2f} / p99 {r['big']['p99']:.2f} / p99.9 {r['big']['p99.9']:.2f} / max "
          f"{r['big']['max']:.2f} ms; of {small['runs']} parked p50 {r['small']['p50']:.2f} / p99 "
          f"{r['small']['p99']:.2f} / p99.9 {r['small']['p99.9']:.2f} / max {r['small']['max']:.2f} ms; "
          f"ratio p50 {r['p50_ratio']:.2f}, p99 {r['p99_ratio']:.2f} "
          f"[target p99 <= {TARGET_P99_RATIO}: {ok}]")  # fmt: skip
    d = result["deadlines"]["lateness_s"]
    ok = "ok" if d["p99"] < TARGET_LATENESS_P99_S else "OVER TARGET"
    print(f"  {d['count']} deadlines falling due together among {big['runs']} parked: lateness p50 "
          f"{d['p50'] * 1000:.0f} / p99 {d['p99'] * 1000:.0f} / max {d['max'] * 1000:.0f} ms "
          f"[target p99 < {TARGET_LATENESS_P99_S:g} s: {ok}]")  # fmt: skip
    for label in ("small", "big"):
        s = result["restart"][label]
        print(f"  restart on {result['parking'][label]['runs']} parked: serving after {s['serving_s']:.2f} s "
              f"(store open {s['open_s']:.2f} s), first resume completed at "
              f"{s['first_resume_done_s']:.2f} s; "
              f"runtime process RSS {s['rss_kib'] / 1024:.1f} MB")  # fmt: skip
    for label in ("small", "big"):
        i = result["inbox"][label]
        ok = "ok" if i["first_page_ms_median"] < TARGET_INBOX_MS else "OVER TARGET"
        print(f"  inbox on {result['parking'][label]['runs']} parked: first page "
              f"({i['first_page_items']} waits) "
              f"{i['first_page_ms_median']:.2f} ms [target < {TARGET_INBOX_MS:g} ms: {ok}], pending counts "
              f"(each stops at {i.get('counts_stop_at', 0):,}) {i['counts_ms_median']:.1f} ms")  # fmt: skip
    print(f"results: {result['out']}")


def _server_setting(url: str, name: str) -> str:
    import psycopg

    with psycopg.connect(url, autocommit=True) as conn:
        row = conn.execute(f"SHOW {name}").fetchone()
    return str(row[0]) if row else "?"


def parse_args(argv: Sequence[str] | None) -> argparse.Namespace:
    parser = argparse.ArgumentParser(description=(__doc__ or "").splitlines()[0])
    parser.add_argument("--n", type=int, default=1_000_000, help="runs to park (default 1,000,000)")
    parser.add_argument("--batch", type=int, default=2000, help="concurrent starts while parking")
    parser.add_argument("--probes", type=int, default=1000, help="runs resumed per database")
    parser.add_argument("--blocks", type=int, default=5, help="alternating blocks the probes are split into")
    parser.add_argument("--deadlines", type=int, default=1000, help="deadlines falling due together")
    parser.add_argument("--deadline-margin", type=float, default=15.0,
                        help="seconds (+1 per 100 runs) from parking to the deadline")  # fmt: skip
    parser.add_argument("--poll-interval", type=float, default=0.05, help="the runtime's (default 0.05 s)")
    add_store_arguments(parser)
    parser.add_argument("--dir", type=Path, default=None, help="where the SQLite files go")
    parser.add_argument("--out", type=Path, default=None, help="JSON output file")
    return parser.parse_args(argv)


def main(argv: Sequence[str] | None = None) -> int:
    args = parse_args(argv)
    workdir = args.dir or Path(tempfile.mkdtemp(prefix="pyworkflow-parked-"))
    workdir.mkdir(parents=True, exist_ok=True)
    out = args.out or RESULTS_DIR / f"parked-{args.store}.json"
    default = "(default)" if args.poll_interval == 0.05 else "(non-default)"
    durability = "synchronous=FULL"
    if args.store == "postgresql":  # autovacuum decides how much dead space parking leaves
        durability = (
            f"synchronous_commit=on, autovacuum={_server_setting(args.url, 'autovacuum')} (the server's)"
        )
    result: dict[str, Any] = {
        "config": {
            "n": args.n,
            "store": args.store,
            "batch": args.batch,
            "probes": args.probes,
            "deadlines": args.deadlines,
            "settings": f"{durability}, lease_ttl=30.0, poll_interval={args.poll_interval} {default}, "
            f"max_concurrency=1000; batches of {args.batch} concurrent starts",
            "command": " ".join([Path(sys.executable).name, "-m", "bench.parked", *(argv or sys.argv[1:])]),
            "python": platform.python_version(),
            "sqlite": sqlite3.sqlite_version,
            "postgresql": _server_setting(args.url, "server_version") if args.store == "postgresql" else None,
            "cpus": os.cpu_count(),
            "date_utc": time.strftime("%Y-%m-%dT%H:%M:%SZ", time.gmtime()),
            "loadavg_at_start": [round(x, 2) for x in os.getloadavg()],
            "database_dir": str(workdir),
            "machine": describe(),
        },
        "targets": {
            "bytes_per_waiting_run": TARGET_BYTES_PER_WAITING_RUN,
            "resume_p99_ratio": TARGET_P99_RATIO,
            "deadline_lateness_p99_s": TARGET_LATENESS_P99_S,
            "inbox_first_page_ms": TARGET_INBOX_MS,
        },
    }
    result.update(asyncio.run(run(args, workdir)))
    result["config"]["loadavg_at_end"] = [round(x, 2) for x in os.getloadavg()]
    return save_and_report(out, result, report)


if __name__ == "__main__":
    sys.exit(main())
