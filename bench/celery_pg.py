"""The HITL workload on PostgreSQL: the local runtime, and Celery with 1 and 2 worker processes.

    .venv/bin/python -m bench.celery_pg [--n 2000] [--only local|celery1|celery2] [--repeat 3]
                                        [--concurrency 32] [--json out.json]

Phases (as in the core benchmark):
  A  start + suspend: step ``prepare`` (~200-byte result), then a step that saves a ~200-byte
     checkpoint and suspends on ``step_hook``; ends when all N are suspended (counted in the store).
  B  resume + complete: ``resume_hook`` for every run; ends when all N completed with the payload in
     their result (``prepare`` not re-executed: checked).
  C  plain: N runs of a 3-step workflow without suspension.
Also: the time from ``resume_hook`` returning to the suspended step running again (p50, p99).

With ``--repeat K`` each configuration runs K times (a new database each time) and the median of
each figure is printed after the single runs. The 1-minute load average is printed with every
run: the machine is shared, read the figures with it.

Needs PostgreSQL (``$PYWORKFLOW_TEST_PG``, default postgres@127.0.0.1:5432) and, for Celery,
Redis (``$CELERY_BROKER_URL``, default redis://127.0.0.1:6379/0). Each configuration gets a new
database, dropped afterwards.
"""

from __future__ import annotations

import argparse
import asyncio
import json
import os
import secrets
import statistics
import subprocess
import sys
import tempfile
import time
from pathlib import Path
from typing import Any
from urllib.parse import urlsplit, urlunsplit

import psycopg

import pyworkflow
from pyworkflow import load_step_checkpoint, save_step_checkpoint, step, step_hook, workflow

ROOT = Path(__file__).resolve().parents[1]
PG_ADMIN = os.environ.get("PYWORKFLOW_TEST_PG", "postgresql://postgres@127.0.0.1:5432/postgres")
BROKER = os.environ.get("CELERY_BROKER_URL", "redis://127.0.0.1:6379/0")

# -- the workload (imported by the workers as bench.celery_pg) -----------------------------------

_out: dict[str, int] = {}


def _record(kind: str, line: str) -> None:
    """Append a line to this process's file for ``kind`` (workers and driver share a folder)."""
    folder = Path(os.environ["BENCH_DIR"])
    fd = _out.get(kind)
    if fd is None:
        fd = _out[kind] = os.open(folder / f"{kind}.{os.getpid()}", os.O_WRONLY | os.O_APPEND | os.O_CREAT)
    os.write(fd, (line + "\n").encode())


def _read(kind: str) -> list[list[str]]:
    return [
        line.split(" ")
        for path in Path(os.environ["BENCH_DIR"]).glob(f"{kind}.*")
        for line in path.read_text().splitlines()
    ]


@step
async def prepare(i: int) -> dict[str, Any]:
    _record("prepare", str(i))
    return {"i": i, "pad": "p" * 190}


@step
async def review(i: int) -> Any:
    state = await load_step_checkpoint()
    if state is None:
        await save_step_checkpoint({"i": i, "pad": "c" * 190})
    else:
        _record("running", f"{i} {time.time()}")  # the step runs again after resume_hook
    return await step_hook("approve", on_created=lambda token: _record("token", f"{i} {token}"))


@workflow
async def hitl(i: int) -> dict[str, Any]:
    a = await prepare(i)
    payload = await review(i)
    return {"i": a["i"], "payload": payload}


@step
async def one(i: int) -> int:
    return i + 1


@step
async def two(i: int) -> int:
    return i * 2


@step
async def three(i: int) -> str:
    return f"done {i}"


@workflow
async def plain(i: int) -> str:
    return await three(await two(await one(i)))


# -- the driver ------------------------------------------------------------------------------


async def _until(url: str, workflow_name: str, status: str, n: int, timeout: float) -> None:
    """Poll the store (its own connection) until ``n`` runs of ``workflow_name`` are ``status``."""
    deadline = time.monotonic() + timeout
    async with await psycopg.AsyncConnection.connect(url, autocommit=True) as conn:
        while True:
            cur = await conn.execute(
                "SELECT count(*) FROM runs WHERE workflow = %s AND status = %s", (workflow_name, status)
            )
            row = await cur.fetchone()
            if row is not None and row[0] >= n:
                return
            if time.monotonic() > deadline:
                raise TimeoutError(f"{workflow_name}: not {n} {status} after {timeout} s")
            await asyncio.sleep(0.02)


async def _gather_in_chunks(calls: list[Any], size: int = 200) -> list[Any]:
    out: list[Any] = []
    for start in range(0, len(calls), size):
        out.extend(await asyncio.gather(*calls[start : start + size]))
    return out


def _percentile(values: list[float], q: float) -> float:
    ordered = sorted(values)
    return ordered[min(len(ordered) - 1, int(q * len(ordered)))] if ordered else float("nan")


async def run_phases(url: str, n: int, mod: Any) -> dict[str, float]:
    hitl_name, plain_name = "bench.celery_pg:hitl", "bench.celery_pg:plain"
    t0 = time.perf_counter()
    await _gather_in_chunks([pyworkflow.start(mod.hitl, i) for i in range(n)])
    await _until(url, hitl_name, "suspended", n, timeout=600)
    a = time.perf_counter() - t0
    deadline = time.monotonic() + 30
    while len(tokens := {int(i): t for i, t in _read("token")}) < n and time.monotonic() < deadline:
        await asyncio.sleep(0.05)
    resumed_at: dict[int, float] = {}

    async def resume(i: int) -> None:
        await pyworkflow.resume_hook(tokens[i], {"ok": i})
        resumed_at[i] = time.time()

    t0 = time.perf_counter()
    await _gather_in_chunks([resume(i) for i in range(n)])
    await _until(url, hitl_name, "completed", n, timeout=600)
    b = time.perf_counter() - t0
    with psycopg.connect(url) as conn:
        results = [json.loads(r[0]) for r in conn.execute("SELECT result FROM runs WHERE workflow = %s",
                                                          (hitl_name,))]  # fmt: skip
    assert all(r["payload"] == {"ok": r["i"]} for r in results) and len(results) == n
    prepared = _read("prepare")
    assert len(prepared) == n, f"prepare ran {len(prepared)} times for {n} runs"
    running = {int(i): float(t) for i, t in _read("running")}
    latencies = [running[i] - resumed_at[i] for i in range(n) if i in running]
    t0 = time.perf_counter()
    await _gather_in_chunks([pyworkflow.start(mod.plain, i) for i in range(n)])
    await _until(url, plain_name, "completed", n, timeout=600)
    c = time.perf_counter() - t0
    return {
        "A_runs_per_s": n / a,
        "B_runs_per_s": n / b,
        "C_runs_per_s": n / c,
        "resume_to_running_p50_ms": 1000 * _percentile(latencies, 0.5),
        "resume_to_running_p99_ms": 1000 * _percentile(latencies, 0.99),
    }


def _new_database() -> str:
    name = f"pwbench_{secrets.token_hex(4)}"
    with psycopg.connect(PG_ADMIN, autocommit=True) as conn:
        conn.execute(f'CREATE DATABASE "{name}"')
    p = urlsplit(PG_ADMIN)
    return urlunsplit((p.scheme, p.netloc, f"/{name}", p.query, p.fragment))


def _drop_database(url: str) -> None:
    with psycopg.connect(PG_ADMIN, autocommit=True) as conn:
        conn.execute(f'DROP DATABASE IF EXISTS "{urlsplit(url).path[1:]}" WITH (FORCE)')


async def bench(config: str, n: int, concurrency: int) -> dict[str, float]:
    from bench import celery_pg as mod  # the module workers import (not __main__)

    url = _new_database()
    workdir = tempfile.mkdtemp(prefix="pwbench-")
    os.environ["BENCH_DIR"] = workdir
    for fd in mod._out.values():  # files of a previous run (--repeat) are in its own folder
        os.close(fd)
    mod._out.clear()
    queue = f"pwbench-{secrets.token_hex(4)}"
    workers: list[subprocess.Popen[bytes]] = []
    try:
        if config == "local":
            pyworkflow.configure(storage=url, poll_interval=0.02)
        else:
            env = {**os.environ, "PYTHONPATH": os.pathsep.join([str(ROOT), str(ROOT / "src")])}
            for k in range(int(config[-1])):
                cmd = [sys.executable, "-m", "pyworkflow.cli", "worker", "--storage", url, "--broker", BROKER,
                       "--queue", queue, "-I", "bench.celery_pg", "--concurrency", str(concurrency),
                       "--loglevel", "WARNING", "--hostname", f"b{k}-{queue}@localhost"]  # fmt: skip
                log = open(Path(workdir) / f"worker{k}.log", "wb")  # noqa: SIM115
                workers.append(subprocess.Popen(cmd, env=env, stdout=log, stderr=log, cwd=ROOT))
            pyworkflow.configure(storage=url, runtime="celery", broker=BROKER, queue=queue)
            warm = await pyworkflow.start(mod.plain, -1)  # workers up and connected
            await pyworkflow.wait_for_run(warm, timeout=60)
            with psycopg.connect(url, autocommit=True) as conn:
                conn.execute("DELETE FROM runs WHERE id = %s", (warm,))
        figures = await run_phases(url, n, mod)
        writer = getattr(pyworkflow.get_store(), "_writer", None)  # this process's group commit
        if writer is not None and writer.groups:
            figures["driver_statements_per_group"] = writer.statements / writer.groups
        return figures
    finally:
        await pyworkflow.shutdown()
        for w in workers:
            w.terminate()
        for w in workers:
            try:
                w.wait(timeout=20)
            except subprocess.TimeoutExpired:
                w.kill()
        _drop_database(url)


def main() -> None:
    parser = argparse.ArgumentParser(
        description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter
    )
    parser.add_argument("--n", type=int, default=2000)
    parser.add_argument("--only", choices=["local", "celery1", "celery2"], action="append")
    parser.add_argument("--concurrency", type=int, default=32, help="turns per Celery worker process")
    parser.add_argument("--repeat", type=int, default=1, help="runs per configuration; medians printed")
    parser.add_argument("--json", type=Path, help="also write the figures here")
    args = parser.parse_args()
    figures: dict[str, dict[str, float]] = {}
    runs: dict[str, list[dict[str, float]]] = {}
    for _ in range(max(1, args.repeat)):
        for config in args.only or ["local", "celery1", "celery2"]:
            f = asyncio.run(bench(config, args.n, args.concurrency))
            f["load_1min"] = os.getloadavg()[0]
            runs.setdefault(config, []).append(f)
            _print(config, args.n, f)
    for config, results in runs.items():
        figures[config] = {k: statistics.median(r[k] for r in results) for k in results[0]}
        if len(results) > 1:
            _print(f"{config} median of {len(results)}", args.n, figures[config])
    if args.json:
        args.json.parent.mkdir(parents=True, exist_ok=True)
        args.json.write_text(json.dumps({"n": args.n, "figures": figures, "runs": runs}, indent=2))


def _print(label: str, n: int, f: dict[str, float]) -> None:
    print(
        f"{label:8} N={n}  A {f['A_runs_per_s']:7.0f} runs/s  B {f['B_runs_per_s']:7.0f} runs/s"
        f"  C {f['C_runs_per_s']:7.0f} runs/s"
        f"  resume->running p50 {f['resume_to_running_p50_ms']:6.1f} ms"
        f"  p99 {f['resume_to_running_p99_ms']:6.1f} ms  load {f['load_1min']:.2f}"
        f"  statements/group {f.get('driver_statements_per_group', 0):.0f}",
        flush=True,
    )


if __name__ == "__main__":
    main()
