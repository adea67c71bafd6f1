"""A caller cancelled while its claim is being written loses no run (``LocalRuntime.abandoned``).

``start()`` and ``resume_hook()`` claim the run for this process's runtime in the same
transaction as the run's creation or the decision. A caller cancelled while that write is in
flight (``asyncio.wait_for`` around ``start``, a request handler whose client went away) stops
waiting, but the write commits all the same: the run was then leased to this process with no
turn to run it, and since each heartbeat renews every lease of the process while any turn runs,
it could wait as long as the process stayed busy, and then count as a crash of its run. Now the
claim becomes a turn all the same, or, if the runtime stopped meanwhile, its lease is released.

To hold the write in flight deterministically, no write runs inline on the caller's thread and
the claiming job is held back from the writer until the caller was cancelled; the rest (the
writer, the commit, the hand-over on the caller's loop) is the real path. Both stores
(``PYWORKFLOW_TEST_STORE``)."""

from __future__ import annotations

import asyncio
import time
from collections.abc import AsyncIterator, Callable
from typing import Any

import pytest

import pyworkflow
from pyworkflow import step, step_hook, workflow
from pyworkflow.store import _group_commit, _pg_db
from pyworkflow.store._jobs import Job

TOKENS: dict[int, str] = {}


@step
async def ask(i: int) -> Any:
    def remember(token: str) -> None:
        TOKENS[i] = token

    return await step_hook("approval", on_created=remember)


@step
async def double(i: int) -> int:
    return i * 2


@workflow(name="cancelled_callers.plain")
async def plain(i: int) -> int:
    return await double(i)


@workflow(name="cancelled_callers.asks")
async def asks(i: int) -> Any:
    return await ask(i)


@pytest.fixture
async def engine(store_url: str, monkeypatch: pytest.MonkeyPatch) -> AsyncIterator[str]:
    """pyworkflow on a fresh store whose runtime never polls (a run leased and forgotten would
    wait for its lease, 600 s) and whose writes never run inline or in waves: each goes to the
    writer thread."""
    monkeypatch.setattr(_group_commit, "INLINE_MAX_READY", -1)
    # (a caller cancelled while its job waits in a wave: tests/unit/test_group_commit.py)
    monkeypatch.setattr(_group_commit, "WAVES", False)
    monkeypatch.setattr(_pg_db, "INLINE_MAX_READY", -1)
    pyworkflow.configure(storage=store_url, poll_interval=3600, lease_ttl=600)
    TOKENS.clear()
    try:
        yield store_url
    finally:
        await pyworkflow.shutdown()


class Held:
    """Jobs that carry an ``abandoned`` hand-over (the claiming writes), kept from the writer
    until :meth:`let_go`."""

    def __init__(self, database: Any) -> None:
        self.database = database
        self.jobs: list[Job] = []
        self._put: Callable[[Job], None] = database._put
        database._put = self.put

    def put(self, job: Job) -> None:
        if job.abandoned is not None:
            self.jobs.append(job)
        else:
            self._put(job)

    async def caught(self) -> None:
        """Return as soon as the claiming write is held (its caller then waits for it)."""
        deadline = time.monotonic() + 10
        while not self.jobs:
            assert time.monotonic() < deadline, "the claiming write never reached the writer"
            await asyncio.sleep(0)

    def let_go(self) -> None:
        self.database._put = self._put
        for job in self.jobs:
            self._put(job)


async def _cancel_in_flight(call: Any, database: Any) -> None:
    """Run ``call`` until its claiming write is queued, cancel it, then let the write go on."""
    held = Held(database)
    caller = asyncio.ensure_future(call)
    await held.caught()
    caller.cancel()
    with pytest.raises(asyncio.CancelledError):
        await caller
    held.let_go()


async def _until(predicate: Callable[[], Any], what: str, seconds: float = 10) -> None:
    deadline = time.monotonic() + seconds
    while not await predicate():
        assert time.monotonic() < deadline, what
        await asyncio.sleep(0.02)


async def _idle() -> Any:
    """The runtime, once its first run completed and it holds no permit (a poll in flight holds
    the free permits: a start then would leave its run to the queue, claiming nothing)."""
    run_id = await pyworkflow.start(plain, 0)
    await pyworkflow.wait_for_run(run_id, timeout=10)
    return await _quiet()


async def _quiet() -> Any:
    runtime = pyworkflow._api._runtime
    assert runtime is not None

    async def idle() -> bool:
        return bool(runtime.free_permits == runtime.max_concurrency)

    await _until(idle, "the runtime stayed busy")
    return runtime


async def _no_crash(run_id: str) -> None:
    types = [e.type for e in await pyworkflow.get_store().get_events(run_id)]
    assert "run_recovered" not in types, types


async def test_a_start_cancelled_while_its_run_is_created_still_runs_it(engine: str) -> None:
    runtime = await _idle()  # the next start claims its run's first turn for it
    before = runtime.turns
    store = pyworkflow.get_store()
    await _cancel_in_flight(pyworkflow.start(plain, 21), store.database)

    async def created() -> bool:
        return len(await store.list_runs()) == 2

    await _until(created, "the cancelled start's write did not commit")
    runs = await store.list_runs()
    done = [await asyncio.wait_for(pyworkflow.wait_for_run(r.id, timeout=10), 15) for r in runs]
    assert sorted(run.result for run in done) == [0, 42]
    assert runtime.turns == before + 1  # its turn ran here, in the runtime its claim was made for
    for run in runs:
        await _no_crash(run.id)


async def test_a_resume_cancelled_while_it_is_decided_still_resumes_the_run(engine: str) -> None:
    run_id = await pyworkflow.start(asks, 7)
    await pyworkflow.wait_for_run(run_id, until=("suspended",), timeout=10)
    await _quiet()  # the decision claims the resumed turn for it
    await _cancel_in_flight(pyworkflow.resume_hook(TOKENS[7], {"ok": True}), pyworkflow.get_store().database)
    run = await asyncio.wait_for(pyworkflow.wait_for_run(run_id, timeout=10), 15)
    assert run.result == {"ok": True}
    await _no_crash(run_id)


async def test_a_claim_that_lands_after_stop_is_released(engine: str) -> None:
    runtime = await _idle()
    store = pyworkflow.get_store()
    held = Held(store.database)
    caller = asyncio.ensure_future(pyworkflow.start(plain, 5))
    await held.caught()
    caller.cancel()
    with pytest.raises(asyncio.CancelledError):
        await caller
    await runtime.stop()
    held.let_go()  # the run is created, leased to a runtime that has stopped

    async def created() -> bool:
        return len(await store.list_runs()) == 2

    await _until(created, "the cancelled start's write did not commit")

    async def released() -> bool:
        return await store.lease_owners(now=time.time()) == []

    await _until(released, "the lease of a claim that reached a stopped runtime was kept")
    await pyworkflow._api.get_runtime()  # a new runtime takes the run at its first poll
    for run in await store.list_runs():
        await asyncio.wait_for(pyworkflow.wait_for_run(run.id, timeout=10), 15)
        await _no_crash(run.id)
