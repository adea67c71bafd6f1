"""Replay safety: a run whose workflow code changed in flight fails with a clear error instead of
silently mixing results recorded by the old code into the new one."""

from __future__ import annotations

import asyncio
from typing import Any

import pytest

import pyworkflow
from pyworkflow import RunStatus, hook, resume_hook, start, step, wait_for_run, workflow
from pyworkflow._workflow import WorkflowDefinition, _registry

TOKENS: list[str] = []


@pytest.fixture(autouse=True)
def _reset() -> None:
    TOKENS.clear()


@step
async def charge_card() -> str:
    return "charged"


@step
async def refund_card() -> str:
    return "refunded"


@workflow(name="replay-test:payment")
async def payment_v1() -> list[Any]:
    first = await charge_card()
    answer = await hook("confirm", on_created=TOKENS.append)
    return [first, answer]


async def payment_v2() -> list[Any]:
    first = await refund_card()  # the code changed: a different step where charge_card was
    answer = await hook("confirm", on_created=TOKENS.append)
    return [first, answer]


async def test_changed_workflow_code_fails_the_run_with_a_clear_error(engine: str) -> None:
    run_id = await start(payment_v1)
    await wait_for_run(run_id, 5, until=("suspended",))
    original = _registry["replay-test:payment"]
    _registry["replay-test:payment"] = WorkflowDefinition(original.name, payment_v2, original.module)
    try:
        await resume_hook(TOKENS[0], "yes")
        run = await wait_for_run(run_id, 5)
    finally:
        _registry["replay-test:payment"] = original
    assert run.status == RunStatus.FAILED
    assert run.error is not None
    assert run.error["type"] == "pyworkflow.NonDeterminismError"
    assert "charge_card#1" in run.error["message"]


async def test_unchanged_workflow_replays_cleanly(engine: str) -> None:
    run_id = await start(payment_v1)
    await wait_for_run(run_id, 5, until=("suspended",))
    await resume_hook(TOKENS[0], "yes")
    run = await wait_for_run(run_id, 5)
    assert run.result == ["charged", "yes"]
    await asyncio.sleep(0)
    assert (await pyworkflow.get_workflow_run(run_id)).status == RunStatus.COMPLETED
