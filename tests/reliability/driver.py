"""One process of a pyworkflow crash trial: ``python -m tests.reliability.driver STORAGE KEYS``.

It starts a run of :func:`~tests.reliability.workload.trial` for each new key (comma-separated;
a ``"started"`` ledger line once ``start`` returned), and then acts as the reviewer: it decides
every pending step hook (a ``"decide"`` ledger line per accepted or refused decision) until
every run in the database has ended, and exits 0. On the local runtime it also serves the runs
(``pyworkflow.serve()``); with ``--celery BROKER QUEUE`` the ``pyworkflow worker`` processes
serve them. The harness kills it at a crash point (``PYWORKFLOW_CRASH_AT``) or by SIGKILL.
"""

from __future__ import annotations

import argparse
import asyncio
import os

from tests.reliability import workload
from tests.reliability.ledger import Ledger
from tests.reliability.oracle import Oracle

import pyworkflow


async def main(storage: str, keys: list[str], celery: list[str] | None, timeout: float) -> int:
    ledger = Ledger.from_env()
    if celery:
        pyworkflow.configure(storage=storage, runtime="celery", broker=celery[0], queue=celery[1])
    else:
        # A run stays in flight across many of a chain's deaths; the poison-run limit
        # (max_crashes, tested in tests/integration) would end it as WorkerCrashed.
        pyworkflow.configure(storage=storage, poll_interval=0.02, max_crashes=100_000)
    server = None if celery else asyncio.create_task(pyworkflow.serve())
    oracle = Oracle(storage)
    loop = asyncio.get_running_loop()
    deadline = loop.time() + timeout
    try:
        for i, key in enumerate(keys):
            run_id = await pyworkflow.start(workload.trial, key, 0.3 if i % 3 == 0 else 0.0)
            ledger.record(key, "started", run_id=run_id)
        while oracle.unfinished() > 0:
            if loop.time() > deadline:
                # A liveness finding: say what each run was waiting for (the harness also asks the
                # workers for their threads' stacks, tests/reliability/celery_trials.py).
                print(f"driver: runs still unfinished after {timeout} s", flush=True)
                print(oracle.stuck_report(), flush=True)
                return 2
            for hook in await pyworkflow.list_pending_hooks(limit=1000):
                try:
                    await pyworkflow.resume_hook_by_id(hook.hook_id, {"approved": True, "by": os.getpid()})
                    outcome = "accepted"
                except pyworkflow.HookError as exc:
                    outcome = type(exc).__name__
                ledger.record(oracle.key_of(hook.run_id), "decide", wait=hook.hook_id, outcome=outcome)
            await asyncio.sleep(0.05)
        return 0
    finally:
        if server is not None:
            server.cancel()
            await asyncio.gather(server, return_exceptions=True)
        await pyworkflow.shutdown()


if __name__ == "__main__":
    parser = argparse.ArgumentParser()
    parser.add_argument("storage")
    parser.add_argument("keys")
    parser.add_argument("--celery", nargs=2, metavar=("BROKER", "QUEUE"))
    parser.add_argument("--timeout", type=float, default=120.0)
    ns = parser.parse_args()
    keys = [k for k in ns.keys.split(",") if k]
    raise SystemExit(asyncio.run(main(ns.storage, keys, ns.celery, ns.timeout)))
