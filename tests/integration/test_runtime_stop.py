"""A runtime stopped while it claims leaves no lease behind (``LocalRuntime.stop``).

Two moments when a stopping runtime held leases that none of its turns would release: its poll
was in flight (a cancelled caller's write commits all the same), or the poll had returned and
the turns' tasks were made but had not begun (a task cancelled before it began runs none of its
code). Each such lease stayed until it ran out (``lease_ttl``, or the process's end) and then
counted as a crash of its run (``run_recovered``): two local runtimes on one file, one stopping
while busy with the other's runs, left 372 to 1,000 of them (``python -m bench.processes``), and
once a run waited the whole 30 s. Both stores (``PYWORKFLOW_TEST_STORE``)."""

from __future__ import annotations

import asyncio
import uuid
from typing import Any

import pytest

from pyworkflow import step, workflow
from pyworkflow._engine import encode_input
from pyworkflow.runtime._local import LocalRuntime
from pyworkflow.store import Store, open_store

N = 20


@step
async def double(i: int) -> int:
    return i * 2


@workflow(name="runtime_stop.plain")
async def plain(i: int) -> int:
    return await double(i)


async def _queued(store: Store) -> list[str]:
    """N runs due now that nobody holds (as ``start`` leaves them at capacity)."""
    ids = [uuid.uuid4().hex for _ in range(N)]
    for i, run_id in enumerate(ids):
        await store.create_run(
            run_id,
            "runtime_stop.plain",
            encode_input((i,), {}, None),
            now=0.0,
            lease_owner=None,
            lease_ttl=30,
        )
    return ids


async def _stop_at(store: Store, moment: str, calls: int = 1) -> LocalRuntime:
    """A runtime on ``store`` stopped at ``moment``: ``in_flight`` (its poll's write submitted,
    not yet answered) or ``unstarted`` (the poll answered, its turns' tasks made, none begun);
    with ``calls`` calls of ``stop()`` at once (``unstarted``), returning when the last one
    returned."""
    runtime = LocalRuntime(store, poll_interval=3600, lease_ttl=600)
    real_poll = store.poll
    entered, gate = asyncio.Event(), asyncio.Event()
    stopping: list[asyncio.Task[None]] = []

    async def poll(*args: Any, **kwargs: Any) -> Any:
        if moment == "in_flight":
            call = asyncio.ensure_future(real_poll(*args, **kwargs))
            entered.set()
            await gate.wait()  # stop() cancels the loop here, the call going on
            return await call
        result = await real_poll(*args, **kwargs)
        if not stopping:  # the first poll (the loop may poll again before stop() begins)
            # Scheduled before the turns' tasks are made (right after this returns): stop()
            # runs first and cancels them before they begin.
            stopping.extend(asyncio.ensure_future(runtime.stop()) for _ in range(calls))
            entered.set()
        return result

    store.poll = poll  # type: ignore[method-assign]
    await runtime.start()
    await asyncio.wait_for(entered.wait(), 10)
    if moment == "in_flight":
        stop = asyncio.ensure_future(runtime.stop())
        await asyncio.sleep(0.05)
        gate.set()
        await asyncio.wait_for(stop, 10)
    else:
        await asyncio.wait_for(stopping[-1], 10)
    store.poll = real_poll  # type: ignore[method-assign]
    assert runtime.turns == 0  # no turn began
    return runtime


async def _check_released_then_run(store: Store, ids: list[str]) -> None:
    """No lease left on the runs; another runtime then runs each once, with no crash counted."""
    owners = await store.lease_owners(now=0.0)
    assert owners == [], owners
    again = LocalRuntime(store, poll_interval=0.02)
    await again.start()
    try:
        for run_id in ids:
            for _ in range(500):
                run = await store.get_run(run_id)
                assert run is not None
                if run.status.is_terminal:
                    break
                await asyncio.sleep(0.02)
            assert run.status == "completed", run
            types = [e.type for e in await store.get_events(run_id)]
            assert "run_recovered" not in types, types
    finally:
        await again.stop()


@pytest.mark.parametrize("moment", ["in_flight", "unstarted"])
async def test_a_runtime_stopped_while_it_claims_leaves_no_lease(store_url: str, moment: str) -> None:
    """``in_flight``: its poll's write submitted, not yet answered; ``unstarted``: the poll
    answered and its turns' tasks made, none begun."""
    store = open_store(store_url)
    try:
        ids = await _queued(store)
        await _stop_at(store, moment)
        await _check_released_then_run(store, ids)
    finally:
        store.close()


async def test_a_second_stop_returns_once_the_first_has_released_every_lease(store_url: str) -> None:
    """Two ``stop()`` at once: the second, which finds the first under way, returns only when the
    first has released the leases of the turns that never began."""
    store = open_store(store_url)
    try:
        ids = await _queued(store)
        await _stop_at(store, "unstarted", calls=2)
        assert await store.lease_owners(now=0.0) == []  # checked as the second call returns
        await _check_released_then_run(store, ids)
    finally:
        store.close()
