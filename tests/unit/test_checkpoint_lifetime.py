"""A step's checkpoints are gone once the step cannot run again: with its result (also on the
spec's timeout path, which returns without ``delete_step_checkpoint``), with its final failure,
and when the run ends (a cancelled run waiting inside the step keeps nothing). A retry still
reads them. Both backends, through the engine."""

from __future__ import annotations

import asyncio
import time
from typing import Any

import pytest

import pyworkflow
from pyworkflow import (
    STEP_HOOK_TIMEOUT,
    FatalError,
    RunStatus,
    hook,
    load_step_checkpoint,
    save_step_checkpoint,
    start,
    step,
    step_hook,
    wait_for_run,
    workflow,
)

SEEN: list[Any] = []
TOKENS: list[str] = []


@pytest.fixture(autouse=True)
def _reset() -> None:
    SEEN.clear()
    TOKENS.clear()


async def _checkpoints(run_id: str) -> set[tuple[str, str]]:
    return set((await pyworkflow.get_store().load_state(run_id)).checkpoints)


async def _token(timeout: float = 10.0) -> None:
    """Until the run reached the hook after the step (its token was handed out)."""
    deadline = time.monotonic() + timeout
    while not TOKENS:
        if time.monotonic() > deadline:
            raise AssertionError("timed out waiting for the hook after the step")
        await asyncio.sleep(0.01)


@step
async def review_step(draft: str) -> dict[str, Any]:
    """The spec's review_step with a short deadline: its timeout path returns without deleting."""
    checkpoint = await load_step_checkpoint()
    SEEN.append(checkpoint)
    if checkpoint is None:
        state = {"draft": draft}
        await save_step_checkpoint({"state": state})
    else:
        state = checkpoint["state"]
    feedback = await step_hook("human_review", timeout="0.2s", on_timeout="return")
    if feedback is STEP_HOOK_TIMEOUT:
        return {"state": state, "reviewed": False}
    return {"state": state, "reviewed": True}


@workflow
async def review_then_wait(draft: str) -> dict[str, Any]:
    reviewed = await review_step(draft)
    await hook("publish", on_created=TOKENS.append)  # the run stays alive after the step
    return reviewed


async def test_the_timeout_path_leaves_no_checkpoint_behind(engine: str) -> None:
    run_id = await start(review_then_wait, "hello")
    await _token()
    await wait_for_run(run_id, 10, until=("suspended",))
    # The step returned on its timeout path (no delete_step_checkpoint): its checkpoint went with
    # its result, while the run itself is still waiting.
    assert SEEN == [None, {"state": {"draft": "hello"}}]
    assert await _checkpoints(run_id) == set()
    await pyworkflow.resume_hook(TOKENS[0], None)
    run = await wait_for_run(run_id, 10)
    assert run.status == RunStatus.COMPLETED
    assert run.result == {"state": {"draft": "hello"}, "reviewed": False}


@step
async def chat(visitor: str) -> str:
    if await load_step_checkpoint() is None:
        await save_step_checkpoint({"transcript": [f"hello {visitor}"]})
    answer = await step_hook("visitor", on_created=TOKENS.append)  # the visitor walks away
    return str(answer)


@workflow
async def support(visitor: str) -> str:
    return await chat(visitor)


async def test_a_cancelled_chat_keeps_no_transcript(engine: str) -> None:
    run_id = await start(support, "ada")
    await wait_for_run(run_id, 10, until=("suspended",))
    assert await _checkpoints(run_id) == {("chat#1", "")}  # the step waits: it needs the transcript
    assert await pyworkflow.cancel_workflow(run_id) is True
    assert (await pyworkflow.get_workflow_run(run_id)).status == RunStatus.CANCELLED
    assert await _checkpoints(run_id) == set()


@step(max_retries=2, retry_delay=0.01)
async def flaky(fail_times: int) -> str:
    checkpoint = await load_step_checkpoint()
    SEEN.append(checkpoint)
    attempt = 1 if checkpoint is None else checkpoint["attempt"] + 1
    await save_step_checkpoint({"attempt": attempt})
    if attempt <= fail_times:
        raise RuntimeError(f"attempt {attempt} failed")
    return f"ok after {attempt}"


@step
async def fatal() -> None:
    await save_step_checkpoint({"half": "done"})
    raise FatalError("declined")


@workflow
async def retried(fail_times: int) -> str:
    first = await flaky(fail_times)
    await hook("hold", on_created=TOKENS.append)
    return first


@workflow
async def caught() -> str:
    try:
        await fatal()
    except FatalError:
        pass
    await hook("hold", on_created=TOKENS.append)
    return "handled"


async def test_a_retry_reads_the_checkpoint_and_the_result_deletes_it(engine: str) -> None:
    run_id = await start(retried, 2)
    await _token()
    await wait_for_run(run_id, 10, until=("suspended",))
    assert SEEN == [None, {"attempt": 1}, {"attempt": 2}]  # each retry continued from the last save
    assert await _checkpoints(run_id) == set()
    await pyworkflow.resume_hook(TOKENS[0], None)
    assert (await wait_for_run(run_id, 10)).result == "ok after 3"


async def test_a_final_failure_deletes_the_checkpoint(engine: str) -> None:
    run_id = await start(caught)
    await _token()
    await wait_for_run(run_id, 10, until=("suspended",))
    assert await _checkpoints(run_id) == set()  # the failure is replayed; nothing re-runs the step


async def test_a_failed_run_keeps_no_checkpoint(engine: str) -> None:
    run_id = await start(retried, 5)  # more failures than retries: the run fails with the step
    run = await wait_for_run(run_id, 10)
    assert run.status == RunStatus.FAILED
    assert SEEN == [None, {"attempt": 1}, {"attempt": 2}]
    assert await _checkpoints(run_id) == set()
