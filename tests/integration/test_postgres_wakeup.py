"""On PostgreSQL the local runtime is woken by LISTEN/NOTIFY: a decision recorded by another
process (here: another store instance) resumes the run at once, not at the next poll."""

from __future__ import annotations

import asyncio
import time
from typing import Any

import pyworkflow
from pyworkflow import start, step, step_hook, wait_for_run, workflow
from pyworkflow.store import open_store

TOKENS: list[str] = []


@step
async def ask() -> Any:
    return await step_hook("answer", on_created=TOKENS.append)


@workflow
async def asking() -> Any:
    return await ask()


async def test_a_decision_from_another_process_wakes_the_runtime_at_once(pg_database: str) -> None:
    pyworkflow.configure(storage=pg_database, poll_interval=30.0)  # polling alone would take 30 s
    try:
        run_id = await start(asking)
        await wait_for_run(run_id, 10, until=("suspended",))
        other = open_store(pg_database)
        try:
            (wait,) = [w for w in await other.list_waits() if w.run_id == run_id]
            began = time.monotonic()
            await other.resolve_wait(wait_id=wait.id, payload=b'"from elsewhere"', now=time.time())
        finally:
            other.close()
        run = await wait_for_run(run_id, 10)
        assert run.result == "from elsewhere"
        assert time.monotonic() - began < 5
        await asyncio.sleep(0)
    finally:
        await pyworkflow.shutdown()
