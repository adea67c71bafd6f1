"""``wait_for_run`` on a run that no runtime of this process serves (a Celery worker's, another
process's): read every ``poll_interval`` at first, then less and less often, down to once a
second, so a caller waiting hours for a decision does not read the run 20 times a second."""

from __future__ import annotations

import asyncio
import itertools
import time
from typing import Any

import pytest

import pyworkflow
from pyworkflow import _api, start_by_name
from pyworkflow.store import open_store


async def test_a_run_served_elsewhere_is_read_less_and_less_often(
    engine: str, monkeypatch: pytest.MonkeyPatch
) -> None:
    other = open_store(engine)
    try:
        # Nothing in this process serves it: no runtime was started here.
        run_id = await start_by_name(other, "tests.served_elsewhere", {})
        assert _api._runtime is None
        reads: list[float] = []
        read = _api.get_workflow_run

        async def counted(run: str) -> Any:
            reads.append(time.monotonic())
            return await read(run)

        monkeypatch.setattr(_api, "get_workflow_run", counted)
        with pytest.raises(TimeoutError):
            await pyworkflow.wait_for_run(run_id, 3)
        # poll_interval 0.02 s here: 150 reads at that pace; doubling up to 1 s, about 9
        assert 5 <= len(reads) <= 15, len(reads)
        gaps = [b - a for a, b in itertools.pairwise(reads)]
        assert gaps[0] < 0.5 and max(gaps) >= 0.5, gaps

        # Still seen when it ends elsewhere (cancelled by the other store a moment later).
        async def cancel_soon() -> None:
            await asyncio.sleep(0.5)
            await other.cancel_run(run_id, now=time.time())

        canceller = asyncio.ensure_future(cancel_soon())
        run = await pyworkflow.wait_for_run(run_id, 10)
        await canceller
        assert run.status == "cancelled"
    finally:
        other.close()


@pyworkflow.workflow(name="tests.wait_for_run.quick")
async def quick() -> int:
    return 1


@pyworkflow.workflow(name="tests.wait_for_run.waiting")
async def waiting() -> object:
    return await pyworkflow.hook("never")


async def test_waiting_leaves_nothing_behind_in_the_runtime(engine: str) -> None:
    """The runtime keeps a run's event only while someone waits on it: not for an id that names
    no run (a caller may send any), nor after a wait that no turn's end answered."""
    assert (await pyworkflow.wait_for_run(await pyworkflow.start(quick), 10)).result == 1
    runtime = _api._runtime
    assert runtime is not None and runtime.running
    for _ in range(3):
        with pytest.raises(pyworkflow.WorkflowNotFoundError):
            await pyworkflow.wait_for_run("no-such-run", 1)
    parked = await pyworkflow.start(waiting)
    await pyworkflow.wait_for_run(parked, 10, until=("suspended",))
    waiters = [asyncio.ensure_future(pyworkflow.wait_for_run(parked, 0.3)) for _ in range(2)]
    for outcome in await asyncio.gather(*waiters, return_exceptions=True):
        assert isinstance(outcome, TimeoutError), outcome
    assert runtime._changed == {} and runtime._watchers == {}
