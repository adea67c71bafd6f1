"""When the local runtime polls its store after a turn, on SQLite (which cannot notify). A turn
that ends the run (completed, failed, cancelled) stores nothing due, and one that suspends on a
wait without a deadline nothing before the next poll: neither wakes the loop. A turn that stored
a due time (a timer, a deadline, a retry's back-off) has the loop poll at that time, and one
that a decision came during is polled for once its end has committed (the run is due again
only then). Counts, not timings: ``poll_interval`` is long here, so every poll counted was a
wake-up."""

from __future__ import annotations

import asyncio
from collections.abc import AsyncIterator
from pathlib import Path
from typing import Any

import pytest

import pyworkflow
from pyworkflow import _api, hook, step, workflow

#: the test's hold on the step, and the step's signal that it runs (made anew for each test's
#: event loop, see ``polls``)
GATE = asyncio.Event()
ENTERED = asyncio.Event()


@step
async def gated(i: int) -> int:
    ENTERED.set()
    await GATE.wait()
    return i


@workflow(name="tests.polls.plain")
async def plain(i: int) -> int:
    return await gated(i)


@workflow(name="tests.polls.failing")
async def failing(i: int) -> int:
    await gated(i)
    raise ValueError("the run fails after its step")


@workflow(name="tests.polls.waiting")
async def waiting(i: int) -> Any:
    await gated(i)
    return await hook(f"polls-{i}")


@workflow(name="tests.polls.timer")
async def timer(i: int) -> int:
    await gated(i)
    await pyworkflow.sleep(0.3)
    return i


@workflow(name="tests.polls.answered_during_the_turn")
async def answered(i: int) -> Any:
    async def answer(token: str) -> None:  # the decision commits while the turn holds the run
        await pyworkflow.resume_hook(token, {"i": i})

    return await hook(f"answered-{i}", on_created=answer)


@pytest.fixture
async def polls(tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> AsyncIterator[list[float]]:
    global GATE, ENTERED
    GATE, ENTERED = asyncio.Event(), asyncio.Event()
    pyworkflow.configure(storage=f"sqlite:///{tmp_path / 'polls.db'}", poll_interval=30)
    runtime = await _api.get_runtime()
    calls: list[float] = []
    poll = runtime.store.poll

    async def counted(*args: Any, **kwargs: Any) -> Any:
        calls.append(asyncio.get_running_loop().time())
        return await poll(*args, **kwargs)

    monkeypatch.setattr(runtime.store, "poll", counted)
    try:
        yield calls
    finally:
        GATE.set()
        await pyworkflow.shutdown()


async def polls_after_its_turn(calls: list[float], wf: Any, i: int, status: str) -> int:
    """Start ``wf`` and hold its turn in the step until the loop has settled; count the polls
    from letting the turn go until a moment after the run reached ``status``."""
    GATE.clear()
    ENTERED.clear()
    run_id = await pyworkflow.start(wf, i)
    await asyncio.wait_for(ENTERED.wait(), 10)
    await asyncio.sleep(0.2)  # the start's own wake-up, if any, has been polled
    before = len(calls)
    GATE.set()
    run = await pyworkflow.wait_for_run(run_id, 10, until=(status,))
    assert run.status.value == status
    waits = (await pyworkflow.get_store().load_state(run_id)).waits.values()
    assert [w.kind.value for w in waits] == (["hook"] if status == "suspended" else [])
    await asyncio.sleep(0.2)
    return len(calls) - before


async def test_a_turn_that_ends_the_run_does_not_wake_the_poll(polls: list[float]) -> None:
    assert await polls_after_its_turn(polls, plain, 1, "completed") == 0
    assert await polls_after_its_turn(polls, failing, 2, "failed") == 0


async def test_a_turn_that_suspends_without_a_deadline_does_not_wake_the_poll(polls: list[float]) -> None:
    assert await polls_after_its_turn(polls, waiting, 3, "suspended") == 0


async def test_a_turn_that_stores_a_due_time_has_the_loop_poll_then(polls: list[float]) -> None:
    GATE.clear()
    ENTERED.clear()
    run_id = await pyworkflow.start(timer, 4)
    await asyncio.wait_for(ENTERED.wait(), 10)
    await asyncio.sleep(0.2)
    before = len(polls)
    GATE.set()
    released = asyncio.get_running_loop().time()
    run = await pyworkflow.wait_for_run(run_id, 10)  # not poll_interval's 30 s later
    assert run.status.value == "completed" and run.result == 4
    # Polled at the timer's deadline (0.3 s after the turn), which expired its wait and claimed
    # the run, and not before: none at the suspension itself.
    after = polls[before:]
    assert 1 <= len(after) <= 2  # a second if the first came a hair before the deadline
    assert all(t - released >= 0.3 - 0.05 for t in after)


async def test_a_decision_during_the_turn_is_polled_for_once_the_turn_ended(polls: list[float]) -> None:
    """The decision commits while the turn holds the run, so it cannot claim it, and the poll
    it wakes finds the run still leased; the end of the turn leaves the run due, and its
    commit wakes the loop (the old immediate poll at the turn's end ran before that deferred
    commit, and the run waited a poll_interval)."""
    before = len(polls)
    run_id = await pyworkflow.start(answered, 5)
    run = await pyworkflow.wait_for_run(run_id, 10)
    assert run.status.value == "completed" and run.result == {"i": 5}
    # The decision's wake-up and the end of the turn's: two polls, or one if the deferred end
    # committed before the loop got to the first (a slow machine); never a poll a turn.
    assert 1 <= len(polls) - before <= 2
