"""What the graph server's sweeper costs after many approvals were decided before their escalation.

    .venv/bin/python -m bench.escalations [--n 20000] [--sweeps 12] [--store sqlite|postgresql]
                                          [--url URL] [--out FILE]

On a new database (SQLite in a temporary folder, or a new database on the PostgreSQL server at
``--url``, dropped after), through the graph store's service layer in this process: ``--n``
traversers each pause on an approval assigned to one reviewer that escalates after 60 s, and the
reviewer decides every one of them. Then, with the clock two minutes on (every escalation's time
has passed), the sweeper's pass is timed ``--sweeps`` times in a row: the first one, then the
median of the rest, and the transactions of the store's writer over all of them (a count). A
sweep runs four times a second in a server (``sweep_seconds``); a decided approval's escalation
can never come, so a sweep should not have to read it more than once. The figures are printed
and written to ``bench/results/escalations-<store>.json`` (or ``--out``).
"""

from __future__ import annotations

import argparse
import asyncio
import contextlib
import statistics
import sys
import tempfile
import time
from collections.abc import Sequence
from pathlib import Path
from typing import Any

from atfgraph._json import dumps
from atfgraph.server._assign import Assignees, Escalation
from atfgraph.server._hub import Hub
from atfgraph.server._identity import Identity, Principal, Role
from atfgraph.server._service import Service
from atfgraph.server._store import GraphStore

from ._observers import RESULTS_DIR, add_store_arguments, save_and_report
from .atfgraph_cycles import _database

OWNER = Principal("t-owner", "olga", Role.OWNER)
REVIEWER = Principal("t-rita", "rita", Role.REVIEWER)
WORKER = Principal("t-worker", "w1", Role.WORKER)
BATCH = 200


async def decided_before_escalation(service: Service, n: int) -> None:
    """``n`` approvals that escalate after 60 s, each decided at once."""
    store = service.store
    worker = (await store.register_worker("desk", "1", BATCH))["id"]
    escalate = Escalation(Assignees((), ("boss",)), 600)
    approvals: list[str] = []
    for first in range(0, n, BATCH):
        count = min(n, first + BATCH) - first
        await asyncio.gather(
            *(service.submit(OWNER, "desk.refund", dumps({"i": first + i}), 3) for i in range(count))
        )
        tasks = await store.claim(worker, count)
        requested = await asyncio.gather(
            *(
                service.request_approval(
                    WORKER,
                    t["traverser"]["id"],
                    t["epoch"],
                    "refund",
                    b'{"question":"ok?"}',
                    None,
                    60,
                    True,
                    assign_to=Assignees((), ("rita",)),
                    escalate=escalate,
                )
                for t in tasks
            )
        )
        approvals.extend(r[0]["id"] for r in requested)
    for first in range(0, n, BATCH):
        await asyncio.gather(
            *(service.decide(REVIEWER, a, "approved", b"{}") for a in approvals[first : first + BATCH])
        )


async def measure(location: str, n: int, sweeps: int) -> dict[str, Any]:
    store = GraphStore(location, lease_seconds=600)
    try:
        service = Service(store, Identity(store.db), Hub())
        started = time.perf_counter()
        await decided_before_escalation(service, n)
        setup = time.perf_counter() - started
        real = time.time
        offset = 120.0  # every escalation's time has passed
        time.time = lambda: real() + offset  # type: ignore[assignment]
        try:
            transactions = store.db.commits + store.db.groups
            samples = []
            for _ in range(sweeps):
                began = time.perf_counter()
                await store.sweep()
                samples.append((time.perf_counter() - began) * 1000)
            transactions = store.db.commits + store.db.groups - transactions
        finally:
            time.time = real  # type: ignore[assignment]
        return {
            "decided_approvals": n,
            "setup_seconds": round(setup, 1),
            "first_sweep_ms": round(samples[0], 2),
            "later_sweeps_median_ms": round(statistics.median(samples[1:]), 3) if sweeps > 1 else None,
            "sweeps": sweeps,
            "writer_transactions": transactions,
        }
    finally:
        store.close()


def run(args: argparse.Namespace) -> dict[str, Any]:
    with (
        tempfile.TemporaryDirectory(prefix="bench-escalations-") as tmp,
        _database(args.url if args.store == "postgresql" else None) as db,
    ):
        figures = asyncio.run(measure(db or str(Path(tmp) / "g.db"), args.n, args.sweeps))
    return {"store": args.store, **figures}


def report(result: dict[str, Any]) -> None:
    print(
        f"{result['decided_approvals']} approvals decided before their escalation, on {result['store']}"
        f" (made in {result['setup_seconds']} s): the first sweep after their escalation time "
        f"{result['first_sweep_ms']} ms, the next {result['sweeps'] - 1} "
        f"{result['later_sweeps_median_ms']} ms each (median); {result['writer_transactions']} "
        f"transactions of the store's writer in the {result['sweeps']} sweeps"
    )


def parse_args(argv: Sequence[str] | None) -> argparse.Namespace:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--n", type=int, default=20_000, help="approvals decided (default 20000)")
    parser.add_argument("--sweeps", type=int, default=12, help="sweeps timed in a row (default 12)")
    add_store_arguments(parser)
    parser.add_argument(
        "--out",
        type=Path,
        default=None,
        help="JSON output file (default bench/results/escalations-STORE.json)",
    )
    args = parser.parse_args(argv)
    if args.n < 1 or args.sweeps < 2:
        parser.error("--n must be at least 1 and --sweeps at least 2")
    return args


def main(argv: Sequence[str] | None = None) -> int:
    args = parse_args(argv)
    result = run(args)
    return save_and_report(args.out or RESULTS_DIR / f"escalations-{args.store}.json", result, report)


if __name__ == "__main__":
    with contextlib.suppress(KeyboardInterrupt):
        sys.exit(main())
