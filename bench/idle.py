"""What an idle process costs: the polls and CPU of processes that have nothing to do.

    .venv/bin/python -m bench.idle [--seconds 10] [--store sqlite|postgresql] [--url URL] [--out FILE]

Two processes are watched for ``--seconds`` after a warm-up, each on a new database (SQLite in a
temporary folder, or a new database on the PostgreSQL server at ``--url``, dropped after):

* pyworkflow's local runtime (in this process, default settings) with one run parked on a hook:
  its polls of the store per second (counted by wrapping ``Store.poll``), this process's CPU, and
  on PostgreSQL the CPU of the backends serving the database;
* a graph server and one worker (``atfgraph.server``, ``atfgraph.worker`` as subprocesses, default
  settings, no traffic): each one's CPU and PostgreSQL's, and the transactions of the server's
  store writer per second (counted by the server, ``GET /stats``) and on PostgreSQL the
  database's commits per second (``pg_stat_database``, every client's).

CPU is given as a percentage of one core over the window; the polls are a count, not a timing.
The figures are printed and written to ``bench/results/idle-<store>.json`` (or ``--out``).
"""

from __future__ import annotations

import argparse
import asyncio
import contextlib
import os
import sys
import tempfile
import time
from collections.abc import Sequence
from pathlib import Path
from typing import Any

import httpx

import pyworkflow
from pyworkflow import hook, workflow
from pyworkflow.store import sqlite_url

from ._observers import RESULTS_DIR, add_store_arguments, save_and_report
from .atfgraph_cycles import Stack, _database, _postgres_cpu_seconds

WARM_UP = 1.5


@workflow(name="bench.idle.parked")
async def parked() -> Any:
    return await hook("never")


async def local_runtime(storage: str, pg: str | None, seconds: float) -> dict[str, Any]:
    pyworkflow.configure(storage=storage)
    try:
        await pyworkflow.start(parked)
        await asyncio.sleep(WARM_UP)
        runtime = pyworkflow._api._runtime
        assert runtime is not None
        store = runtime.store
        polls = 0
        poll = store.poll

        async def counted(*args: Any, **kwargs: Any) -> Any:
            nonlocal polls
            polls += 1
            return await poll(*args, **kwargs)

        store.poll = counted  # type: ignore[method-assign]
        cpu, db_cpu, began = time.process_time(), _postgres_cpu_seconds(pg), time.monotonic()
        await asyncio.sleep(seconds)
        wall = time.monotonic() - began
        figures = {
            "polls_per_s": round(polls / wall, 2),
            "cpu_percent": round(100 * (time.process_time() - cpu) / wall, 2),
            "postgresql_cpu_percent": None
            if pg is None
            else round(100 * (_postgres_cpu_seconds(pg) - db_cpu) / wall, 2),
            "poll_interval": runtime.poll_interval,
        }
        store.poll = poll  # type: ignore[method-assign]
        return figures
    finally:
        await pyworkflow.shutdown()


def _writer_transactions(stack: Stack) -> int:
    """The transactions of the server's store writer so far (``GET /api/v2/stats``: write-function
    commits and statement groups)."""
    stats = httpx.get(
        stack.url + "/api/v2/stats", headers={"Authorization": f"Bearer {stack.token()}"}, timeout=5
    ).json()
    return int(stats["commits"]) + int(stats.get("groups", 0))


def _postgres_commits(db: str | None) -> int | None:
    """Transactions committed in the database so far (``pg_stat_database``: every client's, a
    second or so late), or None on SQLite."""
    if db is None:
        return None
    import psycopg  # the postgres extra's, needed only here

    with psycopg.connect(db, autocommit=True) as conn:
        sql = "SELECT xact_commit FROM pg_stat_database WHERE datname = current_database()"
        return int(conn.execute(sql).fetchone()[0])  # type: ignore[index]


def graph_server(home: Path, db: str | None, seconds: float) -> dict[str, Any]:
    stack = Stack(home, lease_seconds=30.0, db=db)
    try:
        stack.start()
        time.sleep(WARM_UP)
        transactions, commits = _writer_transactions(stack), _postgres_commits(db)
        before, began = stack.cpu_seconds(), time.monotonic()
        time.sleep(seconds)
        after, wall = stack.cpu_seconds(), time.monotonic() - began
        transactions = _writer_transactions(stack) - transactions
        commits_after = _postgres_commits(db)
        server, worker, _, postgres = (
            round(100 * (b - a) / wall, 2) for a, b in zip(before, after, strict=True)
        )
        return {
            "server_cpu_percent": server,
            "worker_cpu_percent": worker,
            "postgresql_cpu_percent": None if db is None else postgres,
            # A count, not a timing: the transactions idle (the sweeper's, the worker's heartbeats).
            "writer_transactions_per_s": round(transactions / wall, 2),
            "postgresql_commits_per_s": None
            if commits is None or commits_after is None
            else round((commits_after - commits) / wall, 2),
        }
    finally:
        stack.stop()


def run(args: argparse.Namespace) -> dict[str, Any]:
    load = [round(x, 2) for x in os.getloadavg()]
    with tempfile.TemporaryDirectory(prefix="bench-idle-") as tmp:
        with _database(args.url if args.store == "postgresql" else None) as db:
            storage = db or sqlite_url(Path(tmp) / "idle.db")
            local = asyncio.run(local_runtime(storage, db, args.seconds))
        with _database(args.url if args.store == "postgresql" else None) as db:
            server = graph_server(Path(tmp) / "graph", db, args.seconds)
    return {
        "store": args.store,
        "seconds": args.seconds,
        "loadavg_at_start": load,
        "loadavg_at_end": [round(x, 2) for x in os.getloadavg()],
        "local_runtime": local,
        "graph_server": server,
    }


def report(result: dict[str, Any]) -> None:
    local, server = result["local_runtime"], result["graph_server"]
    print(
        f"idle for {result['seconds']} s on {result['store']} (CPU in % of one core; load "
        f"{result['loadavg_at_start'][0]} -> {result['loadavg_at_end'][0]})"
    )
    db = local["postgresql_cpu_percent"]
    print(
        f"  local runtime (poll_interval {local['poll_interval']} s): {local['polls_per_s']} polls/s, "
        f"CPU {local['cpu_percent']} %" + ("" if db is None else f", PostgreSQL {db} %")
    )
    db = server["postgresql_cpu_percent"]
    print(
        f"  graph server + worker: server CPU {server['server_cpu_percent']} %, worker "
        f"{server['worker_cpu_percent']} %"
        + ("" if db is None else f", PostgreSQL {db} %")
        + f"; the server's store writer: {server['writer_transactions_per_s']} transactions/s"
        + ("" if db is None else f", PostgreSQL {server['postgresql_commits_per_s']} commits/s")
    )


def parse_args(argv: Sequence[str] | None) -> argparse.Namespace:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--seconds", type=float, default=10.0, help="the window watched (default 10)")
    add_store_arguments(parser)
    parser.add_argument(
        "--out", type=Path, default=None, help="JSON output file (default bench/results/idle-STORE.json)"
    )
    args = parser.parse_args(argv)
    if args.seconds <= 0:
        parser.error("--seconds must be positive")
    return args


def main(argv: Sequence[str] | None = None) -> int:
    args = parse_args(argv)
    result = run(args)
    return save_and_report(args.out or RESULTS_DIR / f"idle-{args.store}.json", result, report)


if __name__ == "__main__":
    with contextlib.suppress(KeyboardInterrupt):
        sys.exit(main())
