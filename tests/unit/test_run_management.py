"""An operator's transitions of a pyworkflow run (on the backend under test): cancel with a
reason, and retry a failed run, whose completed steps are replayed (not run again) while the step
that failed runs again from the top; refusals change nothing."""

from __future__ import annotations

import pytest

import pyworkflow
from pyworkflow import ConfigurationError, RunStatus, WorkflowNotFoundError, hook, step, workflow

CALLS: dict[str, int] = {"first": 0, "flaky": 0}
FAIL = {"flaky": True}


@step
async def first() -> str:
    CALLS["first"] += 1
    return "one"


@step
async def flaky() -> str:
    CALLS["flaky"] += 1
    if FAIL["flaky"]:
        raise pyworkflow.FatalError("the service was down")
    return "two"


@workflow
async def two_steps() -> list[str]:
    return [await first(), await flaky()]


@workflow
async def parked() -> object:
    return await hook("go")


async def test_retry_replays_completed_steps_and_runs_the_failed_one_again(engine: str) -> None:
    CALLS.update(first=0, flaky=0)
    FAIL["flaky"] = True
    run_id = await pyworkflow.start(two_steps)
    failed = await pyworkflow.wait_for_run(run_id, 30)
    assert failed.status == RunStatus.FAILED and CALLS == {"first": 1, "flaky": 1}

    FAIL["flaky"] = False
    assert await pyworkflow.retry_workflow(run_id) is True
    done = await pyworkflow.wait_for_run(run_id, 30)
    assert (done.status, done.result, done.error) == (RunStatus.COMPLETED, ["one", "two"], None)
    assert CALLS == {"first": 1, "flaky": 2}  # the completed step was replayed, not run again
    events = [e.type for e in await pyworkflow.get_workflow_events(run_id)]
    assert "run_retried" in events and events[-1] == "run_completed"

    assert await pyworkflow.retry_workflow(run_id) is False  # completed: nothing to retry
    assert (await pyworkflow.get_workflow_run(run_id)).status == RunStatus.COMPLETED
    with pytest.raises(WorkflowNotFoundError):
        await pyworkflow.retry_workflow("no-such-run")


async def test_cancel_with_a_reason(engine: str) -> None:
    run_id = await pyworkflow.start(parked)
    await pyworkflow.wait_for_run(run_id, 30, until=("suspended",))
    with pytest.raises(ConfigurationError):
        await pyworkflow.cancel_workflow(run_id, reason="x" * 1001)
    assert (await pyworkflow.get_workflow_run(run_id)).status == RunStatus.SUSPENDED  # unchanged
    assert await pyworkflow.cancel_workflow(run_id, reason="duplicate of another order") is True
    run = await pyworkflow.get_workflow_run(run_id)
    assert run.status == RunStatus.CANCELLED
    assert run.error == {"type": "CancellationError", "message": "duplicate of another order"}
    assert await pyworkflow.list_pending_hooks() == []
    assert await pyworkflow.cancel_workflow(run_id, reason="again") is False  # ended: unchanged
    assert (await pyworkflow.get_workflow_run(run_id)).error["message"] == "duplicate of another order"  # type: ignore[index]
    assert await pyworkflow.retry_workflow(run_id) is False  # only a failed run is retried
