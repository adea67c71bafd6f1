"""On PostgreSQL the local runtime is woken by LISTEN/NOTIFY: a decision recorded by another
process (here: another store instance) resumes the run at once, not at the next poll."""

from __future__ import annotations

import asyncio
import time
from typing import Any

import pyworkflow
from pyworkflow import start, start_by_name, step, step_hook, wait_for_run, workflow
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


@workflow(name="tests.napping")
async def napping(seconds: float) -> str:
    await pyworkflow.sleep(seconds)
    return "rested"


async def test_an_idle_runtime_polls_about_once_a_second_and_still_acts_on_time(pg_database: str) -> None:
    """Notifications wake it, so an idle runtime on PostgreSQL polls as a backstop only (at the
    default 50 ms it would poll about 50 times in these 2.5 s); a timer a turn of its own stores
    while it sleeps still fires on time, and a run started by another process runs at once."""
    pyworkflow.configure(storage=pg_database)
    try:
        first = await start(asking)  # brings the runtime up, then leaves it idle behind a wait
        await wait_for_run(first, 10, until=("suspended",))
        # Idle from here: its start-up polls (the listener's first wake-up, the poll one
        # poll_interval after the first turn's end) are over 50 ms after start returns. Counted
        # from start's return they could land in the window since the statements of a start go
        # out on the caller's thread (five polls in 2.5 s instead of at most four, 1 run in 8).
        await asyncio.sleep(0.3)
        runtime = pyworkflow._api._runtime
        assert runtime is not None
        polls: list[float] = []
        poll = runtime.store.poll

        async def counted(*args: Any, **kwargs: Any) -> Any:
            polls.append(time.monotonic())
            return await poll(*args, **kwargs)

        runtime.store.poll = counted  # type: ignore[method-assign]
        await asyncio.sleep(2.5)
        assert 1 <= len(polls) <= 4, polls

        seen = len(polls)
        while len(polls) == seen:  # right after a poll: the loop's next sleep is a full second
            await asyncio.sleep(0.005)
        began = time.monotonic()
        run_id = await start(napping, 0.3)  # its first turn stores a timer due in 0.3 s
        run = await wait_for_run(run_id, 10)
        assert run.result == "rested"
        assert time.monotonic() - began < 0.3 + 0.4  # not the 1 s of an idle sleep

        other = open_store(pg_database)
        try:
            began = time.monotonic()
            run_id = await start_by_name(other, "tests.napping", {"seconds": 0})
        finally:
            other.close()
        run = await wait_for_run(run_id, 10)
        assert run.result == "rested"
        assert time.monotonic() - began < 0.5
    finally:
        await pyworkflow.shutdown()
