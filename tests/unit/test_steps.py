"""Steps: retries with back-off, FatalError, timeouts, durable sleep, generator steps, cancel."""

from __future__ import annotations

import asyncio
import itertools
import time
from typing import Any

import pytest

import pyworkflow
from pyworkflow import (
    FatalError,
    RetryableError,
    RunStatus,
    StepTimeoutError,
    cancel_workflow,
    resume_hook,
    sleep,
    start,
    step,
    step_hook,
    wait_for_run,
    workflow,
)

ATTEMPTS: list[tuple[str, float]] = []
DELIVERED: list[str] = []
TOKENS: list[str] = []


@pytest.fixture(autouse=True)
def _reset() -> None:
    ATTEMPTS.clear()
    DELIVERED.clear()
    TOKENS.clear()


@step(max_retries=3, retry_delay=0.2, backoff=2.0)
async def flaky(fail_times: int) -> str:
    ATTEMPTS.append(("flaky", time.monotonic()))
    if len(ATTEMPTS) <= fail_times:
        raise ConnectionError(f"attempt {len(ATTEMPTS)} failed")
    return f"ok after {len(ATTEMPTS)}"


@workflow
async def flaky_flow(fail_times: int) -> str:
    return await flaky(fail_times)


async def test_retries_with_exponential_backoff(engine: str) -> None:
    run_id = await start(flaky_flow, 2)
    run = await wait_for_run(run_id, 10)
    assert run.result == "ok after 3"
    gaps = [b[1] - a[1] for a, b in itertools.pairwise(ATTEMPTS)]
    assert gaps[0] >= 0.19 and gaps[1] >= 0.39, gaps  # 0.2 s, then 0.4 s
    types = [e.type for e in await pyworkflow.get_workflow_events(run_id)]
    assert types.count("step_retrying") == 2 and types.count("step_completed") == 1


async def test_retries_exhausted_fail_the_run_with_the_error(engine: str) -> None:
    run_id = await start(flaky_flow, 10)
    run = await wait_for_run(run_id, 10)
    assert run.status == RunStatus.FAILED
    assert run.error is not None and run.error["type"] == "builtins.ConnectionError"
    assert "attempt 4 failed" in run.error["message"]
    assert len(ATTEMPTS) == 4  # the first attempt and 3 retries


@step(max_retries=5, retry_delay=0.01)
async def fatal_step() -> None:
    ATTEMPTS.append(("fatal", time.monotonic()))
    raise FatalError("card declined")


@workflow
async def fatal_flow() -> str:
    try:
        await fatal_step()
    except FatalError as exc:
        return f"caught: {exc}"
    return "unreachable"


async def test_fatal_error_is_not_retried_and_replays_the_same_error(engine: str) -> None:
    run_id = await start(fatal_flow)
    run = await wait_for_run(run_id, 5)
    assert run.result == "caught: card declined"
    assert len(ATTEMPTS) == 1


@step(max_retries=1, retry_delay=0.01)
async def respects_retry_after() -> str:
    ATTEMPTS.append(("retry_after", time.monotonic()))
    if len(ATTEMPTS) == 1:
        raise RetryableError("rate limited", retry_after=0.3)
    return "done"


@workflow
async def retry_after_flow() -> str:
    return await respects_retry_after()


async def test_retryable_error_retry_after_overrides_the_backoff(engine: str) -> None:
    run = await wait_for_run(await start(retry_after_flow), 5)
    assert run.result == "done"
    assert ATTEMPTS[1][1] - ATTEMPTS[0][1] >= 0.29


@step(timeout=0.2, max_retries=1, retry_delay=0.01)
async def slow_step() -> str:
    ATTEMPTS.append(("slow", time.monotonic()))
    await asyncio.sleep(5)
    return "too late"


@workflow
async def slow_flow() -> str:
    try:
        return await slow_step()
    except StepTimeoutError as exc:
        return f"timeout: {exc}"


async def test_step_timeout_is_enforced_per_attempt(engine: str) -> None:
    started = time.monotonic()
    run = await wait_for_run(await start(slow_flow), 5)
    assert run.result is not None and run.result.startswith("timeout: ")
    assert len(ATTEMPTS) == 2
    assert time.monotonic() - started < 3


@workflow
async def sleepy(seconds: float) -> float:
    started = await now_step()
    await sleep(seconds)
    return (await now_step()) - started


@step
async def now_step() -> float:
    return time.time()


async def test_durable_sleep_resumes_by_itself(engine: str) -> None:
    run_id = await start(sleepy, 0.5)
    suspended = await wait_for_run(run_id, 5, until=("suspended",))
    assert suspended.status == RunStatus.SUSPENDED
    run = await wait_for_run(run_id, 5)
    assert 0.5 <= run.result < 3


async def test_durable_sleep_survives_a_restart(engine: str) -> None:
    run_id = await start(sleepy, 0.6)
    await wait_for_run(run_id, 5, until=("suspended",))
    await pyworkflow.shutdown()
    await asyncio.sleep(0.8)  # the timer falls due while nothing runs
    pyworkflow.configure(storage=engine, poll_interval=0.02)
    serving = asyncio.create_task(pyworkflow.serve())
    try:
        run = await wait_for_run(run_id, 5)
        assert run.status == RunStatus.COMPLETED and run.result >= 0.6
    finally:
        serving.cancel()
        await asyncio.gather(serving, return_exceptions=True)


# -- generator steps ----------------------------------------------------------------------------


@step(is_generator=True)
async def streaming_answer(question: str) -> Any:
    for word in ("Let", "me", "check"):
        yield word
    answer = await step_hook("clarify", on_created=TOKENS.append)
    for word in ("you", "said", str(answer)):
        yield word


@workflow
async def chat(question: str) -> int:
    chunks = 0
    async for chunk in streaming_answer(question):
        DELIVERED.append(chunk)
        chunks += 1
    return chunks


async def test_generator_step_does_not_redeliver_chunks_after_a_hook(engine: str) -> None:
    run_id = await start(chat, "where is my order?")
    await wait_for_run(run_id, 5, until=("suspended",))
    assert DELIVERED == ["Let", "me", "check"]
    await resume_hook(TOKENS[0], "QF-4417")
    run = await wait_for_run(run_id, 5)
    assert run.status == RunStatus.COMPLETED
    assert DELIVERED == ["Let", "me", "check", "you", "said", "QF-4417"]
    assert run.result == 3  # the replay's consumer saw only what had not been delivered before


def test_generator_step_is_detected_and_validated() -> None:
    assert pyworkflow._step.is_step(streaming_answer)
    with pytest.raises(pyworkflow.ConfigurationError):

        @step(is_generator=True)
        async def not_a_generator() -> None:
            return None


# -- cancel -------------------------------------------------------------------------------------


@step
async def wait_forever() -> Any:
    return await step_hook("never", on_created=TOKENS.append)


@workflow
async def cancellable() -> Any:
    return await wait_forever()


async def test_cancel_a_waiting_run_cancels_its_hooks(engine: str) -> None:
    run_id = await start(cancellable)
    await wait_for_run(run_id, 5, until=("suspended",))
    assert await cancel_workflow(run_id) is True
    assert await cancel_workflow(run_id) is False
    run = await pyworkflow.get_workflow_run(run_id)
    assert run.status == RunStatus.CANCELLED
    with pytest.raises(pyworkflow.HookCancelledError):
        await resume_hook(TOKENS[0], "too late")


# -- capacity -----------------------------------------------------------------------------------

ACTIVE: list[int] = [0, 0]  # [now, peak]


@step
async def busy() -> None:
    ACTIVE[0] += 1
    ACTIVE[1] = max(ACTIVE[1], ACTIVE[0])
    await asyncio.sleep(0.05)
    ACTIVE[0] -= 1


@workflow
async def busy_flow() -> str:
    await busy()
    return "done"


async def test_runs_beyond_max_concurrency_wait_in_the_queue(store_url: str) -> None:
    ACTIVE[:] = [0, 0]
    pyworkflow.configure(storage=store_url, poll_interval=0.02, max_concurrency=2)
    try:
        run_ids = [await start(busy_flow) for _ in range(6)]
        runs = [await wait_for_run(r, 10) for r in run_ids]
        assert [r.result for r in runs] == ["done"] * 6
        assert ACTIVE[1] == 2
    finally:
        await pyworkflow.shutdown()


async def test_runs_started_all_at_once_keep_to_max_concurrency(store_url: str) -> None:
    # Every start checks for a free permit before its creation commits: without a permit held
    # across that await, all of a burst saw the same free permits and ran at once.
    # And a run queued behind a full runtime never waits for the poll (here a minute): at
    # capacity a turn's end wakes the runtime's loop, which claims the queued runs for the
    # permits freed. The permit used to be freed by the turn task's done callback, which runs
    # after the loop it woke had polled: that poll saw no free permit, and the loop slept a whole
    # poll_interval while every turn ending meanwhile saw free permits and did not wake it.
    ACTIVE[:] = [0, 0]
    pyworkflow.configure(storage=store_url, poll_interval=60, max_concurrency=2)
    try:
        run_ids = await asyncio.gather(*(start(busy_flow) for _ in range(8)))
        runs = [await wait_for_run(r, 20) for r in run_ids]
        assert [r.result for r in runs] == ["done"] * 8
        assert ACTIVE[1] == 2
    finally:
        await pyworkflow.shutdown()


@step
async def busy_after_hook() -> None:
    await step_hook("go", on_created=TOKENS.append)
    await busy()


@workflow
async def resumed_busy_flow() -> str:
    await busy_after_hook()
    return "done"


async def test_runs_resumed_all_at_once_keep_to_max_concurrency(store_url: str) -> None:
    # A decision claims the run it wakes when the runtime has a free permit (the claim rides in
    # the decision's transaction): a burst of decisions must not all take the same permits.
    ACTIVE[:] = [0, 0]
    pyworkflow.configure(storage=store_url, poll_interval=0.02, max_concurrency=2)
    try:
        run_ids = [await start(resumed_busy_flow) for _ in range(8)]
        for r in run_ids:
            assert (await wait_for_run(r, 10, until=(RunStatus.SUSPENDED,))).status == RunStatus.SUSPENDED
        assert ACTIVE[1] == 0 and len(TOKENS) == 8
        await asyncio.gather(*(resume_hook(t, "go") for t in TOKENS))
        runs = [await wait_for_run(r, 10) for r in run_ids]
        assert [r.result for r in runs] == ["done"] * 8
        assert ACTIVE[1] == 2
    finally:
        await pyworkflow.shutdown()
