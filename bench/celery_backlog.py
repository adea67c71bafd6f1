"""A backlog in the broker, as the Celery sweeper sees it: what a sweep publishes again.

    .venv/bin/python -m bench.celery_backlog [--n 20000] [--sweeps 5] [--watch 10] [--broker redis://...]

``--n`` runs are started with the Celery runtime (a new PostgreSQL database, a queue of the
benchmark's own) while no worker consumes, so each has one turn message waiting in the queue: a
backlog. Then ``--sweeps`` sweeps of a sweeper whose ``dispatch_grace`` is 0 (every due run counts
as waiting too long for its message, as the whole backlog does once it is older than the default
30 s) are timed, and what each published is counted, with how long the sweeper then sleeps (its
``sweep_interval``, 1 s: a backlog no longer makes it sweep every 50 ms) and the queue's depth
after them. Then a sweeper is left running ``--watch`` seconds in its own thread, as a worker runs
it (the default ``dispatch_grace``): its sweeps, its process's CPU and PostgreSQL's. Last, the
queue is emptied (the messages lost) and one more sweep publishes them again. Printed as JSON.
"""

from __future__ import annotations

import argparse
import asyncio
import json
import secrets
import statistics
import time
from typing import Any

import pyworkflow
from bench.celery_pg import _drop_database, _gather_in_chunks, _new_database, plain
from pyworkflow.runtime._celery import CeleryOptions, make_app, queue_depth
from pyworkflow.runtime._celery_worker import Sweeper, WorkerSettings


async def sweeps(options: CeleryOptions, storage: str, count: int) -> list[dict[str, Any]]:
    sweeper = Sweeper(WorkerSettings(storage=storage, celery=options, dispatch_grace=0.0))
    try:
        done = []
        for _ in range(count):
            before, started = sweeper.published, time.perf_counter()
            pause = await sweeper.sweep_once()
            done.append({"ms": round((time.perf_counter() - started) * 1000, 1),
                         "published": sweeper.published - before,
                         "then_sleeps_s": round(pause, 3)})  # fmt: skip
        return done
    finally:
        sweeper.stop()


def left_running(options: CeleryOptions, storage: str, seconds: float) -> dict[str, Any]:
    """A sweeper left running ``seconds`` in its own thread, as a worker runs it (the default
    ``dispatch_grace``): sweeps made, this process's CPU and that of the PostgreSQL backends
    serving the database, read just before it stops."""
    from bench.atfgraph_cycles import _postgres_cpu_seconds

    sweeper = Sweeper(WorkerSettings(storage=storage, celery=options))
    made = 0
    sweep_once = sweeper.sweep_once

    async def counted() -> float:
        nonlocal made
        made += 1
        return await sweep_once()

    sweeper.sweep_once = counted  # type: ignore[method-assign]
    cpu, postgres = time.process_time(), _postgres_cpu_seconds(storage)
    sweeper.start()
    try:
        time.sleep(seconds)
        cpu, postgres = time.process_time() - cpu, _postgres_cpu_seconds(storage) - postgres
    finally:
        sweeper.stop()
    return {
        "seconds": seconds,
        "sweeps": made,
        "cpu_s": round(cpu, 2),
        "postgresql_cpu_s": round(postgres, 2),
    }


async def measure(n: int, count: int, broker: str, watch: float) -> dict[str, Any]:
    storage = _new_database()
    options = CeleryOptions(broker, f"pwbench-backlog-{secrets.token_hex(4)}")
    pyworkflow.configure(storage=storage, runtime="celery", broker=options.broker, queue=options.queue)
    try:
        started = time.perf_counter()
        await _gather_in_chunks([pyworkflow.start(plain, i) for i in range(n)])
        seconds = time.perf_counter() - started
        await asyncio.sleep(1)  # RabbitMQ counts a message a moment after confirming it
        queued = await sweeps(options, storage, count)
        running = left_running(options, storage, watch)
        depth = queue_depth(options)
        with make_app(options).connection_for_write() as conn:
            conn.default_channel.queue_purge(options.queue)
        [lost] = await sweeps(options, storage, 1)
        return {
            "runs": n,
            "started_per_s": round(n / seconds, 1),
            "broker": broker.split("://")[0],
            "queued_backlog_sweeps": queued,
            "sweep_ms_median": statistics.median(s["ms"] for s in queued),
            "published_again": sum(s["published"] for s in queued),
            "queue_depth_after": depth,
            "left_running": running,
            "after_the_queue_was_emptied": lost,
        }
    finally:
        await pyworkflow.shutdown()
        with make_app(options).connection_for_write() as conn:
            conn.default_channel.queue_delete(options.queue)
        _drop_database(storage)


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--n", type=int, default=20_000)
    parser.add_argument("--sweeps", type=int, default=5)
    parser.add_argument("--broker", default="redis://127.0.0.1:6379/0")
    parser.add_argument("--watch", type=float, default=10.0, help="seconds a sweeper is left running")
    args = parser.parse_args()
    print(json.dumps(asyncio.run(measure(args.n, args.sweeps, args.broker, args.watch)), indent=2))


if __name__ == "__main__":
    main()
