"""A waiting run holds no thread, task or worker slot (issue 2, semantics 5).

10,000 runs are parked on step hooks in this process, on the default ``synchronous=FULL``; the
thread count and the number of asyncio tasks with 10,000 parked equal those with 100 parked.
Then a sample is resumed and completes with its payload while the rest stay parked.
"""

from __future__ import annotations

import asyncio
import random
import threading
import time
from typing import Any

import pyworkflow
from pyworkflow import step, step_hook, workflow

TOKENS: dict[int, str] = {}


@step
async def wait_for_approval(i: int) -> Any:
    def remember(token: str) -> None:
        TOKENS[i] = token

    return await step_hook("approval", on_created=remember)


@workflow
async def parked(i: int) -> dict[str, Any]:
    decision = await wait_for_approval(i)
    return {"i": i, "decision": decision}


def _count(store: Any, status: str) -> int:
    row = store.db.reader().execute("SELECT COUNT(*) FROM runs WHERE status = ?", (status,)).fetchone()
    return int(row[0])


async def _park(first: int, count: int) -> list[str]:
    """Start ``count`` runs (concurrently, in chunks) and return once all are durably suspended."""
    run_ids: list[str] = []
    for chunk in range(first, first + count, 500):
        run_ids += await asyncio.gather(
            *(pyworkflow.start(parked, i) for i in range(chunk, min(chunk + 500, first + count)))
        )
    store = pyworkflow.get_store()
    deadline = time.monotonic() + 120
    while _count(store, "suspended") < first + count:
        assert time.monotonic() < deadline, f"only {_count(store, 'suspended')} runs suspended"
        await asyncio.sleep(0.05)
    return run_ids


async def _settled_footprint(baseline_tasks: int | None = None) -> tuple[int, int]:
    """Threads and asyncio tasks once the turns that just suspended have returned."""
    deadline = time.monotonic() + 10
    while True:
        await asyncio.sleep(0.1)
        tasks = len(asyncio.all_tasks())
        if baseline_tasks is None or tasks <= baseline_tasks or time.monotonic() > deadline:
            return threading.active_count(), tasks


async def test_ten_thousand_parked_runs_hold_no_threads_or_tasks(engine: str) -> None:
    TOKENS.clear()
    first = await _park(0, 100)
    threads_100, tasks_100 = await _settled_footprint()
    assert len(TOKENS) == 100

    rest = await _park(100, 9_900)
    threads_10k, tasks_10k = await _settled_footprint(tasks_100)
    run_ids = first + rest
    store = pyworkflow.get_store()
    assert _count(store, "suspended") == 10_000
    assert len(TOKENS) == 10_000

    # The footprint does not grow with the number of waiting runs.
    assert threads_10k == threads_100, (threads_100, threads_10k)
    assert tasks_10k == tasks_100, (tasks_100, tasks_10k)
    assert len(await pyworkflow.list_pending_hooks(limit=20_000)) == 10_000

    # A sample resumes and completes; the others stay parked.
    sample = random.Random(2).sample(range(10_000), 50)
    for i in sample:
        await pyworkflow.resume_hook(TOKENS[i], {"approved": i % 2 == 0})
    for i in sample:
        run = await pyworkflow.wait_for_run(run_ids[i], 30)
        assert run.status == "completed", run
        assert run.result == {"i": i, "decision": {"approved": i % 2 == 0}}
    assert _count(store, "completed") == 50
    assert _count(store, "suspended") == 10_000 - 50
    threads_after, tasks_after = await _settled_footprint(tasks_100)
    assert (threads_after, tasks_after) == (threads_100, tasks_100)
