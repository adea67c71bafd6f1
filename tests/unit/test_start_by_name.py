"""``pyworkflow.start_by_name``: a run started by workflow name, without importing the workflow,
is recorded due now for whichever runtime serves the store and has the name registered (here,
this process's local runtime); the input is encoded as ``start`` encodes it; an unknown name
fails the run with a message that says what to do; bad names and inputs are refused before
anything is written (each backend: ``PYWORKFLOW_TEST_STORE``)."""

from __future__ import annotations

from typing import Any

import pytest

import pyworkflow
from pyworkflow import ConfigurationError, SerializationError, step, workflow
from pyworkflow._api import get_runtime


@step
async def shout(text: str) -> str:
    return text.upper()


@workflow(name="by-name:greet")
async def greet(who: str, times: int = 1) -> str:
    return " ".join([await shout(f"hello {who}")] * times)


async def _run_ids() -> list[str]:
    return [r.run_id for r in await pyworkflow.list_runs()]


async def test_a_run_started_by_name_is_executed_by_the_runtime_serving_the_store(engine: str) -> None:
    await get_runtime()
    run_id = await pyworkflow.start_by_name(
        pyworkflow.get_store(), "by-name:greet", {"who": "ann", "times": 2}
    )
    run = await pyworkflow.wait_for_run(run_id, 20)
    assert (run.status, run.result) == ("completed", "HELLO ANN HELLO ANN")
    assert run.workflow_name == "by-name:greet"
    assert run.input == {"args": [], "kwargs": {"who": "ann", "times": 2}}
    # The same document start() writes, naming no module.
    record = await pyworkflow.get_store().get_run(run_id)
    assert record is not None and pyworkflow._serde.loads(record.input) == {
        "args": [],
        "kwargs": {"who": "ann", "times": 2},
    }


async def test_an_unknown_name_fails_the_run_saying_what_to_do(engine: str) -> None:
    await get_runtime()
    run_id = await pyworkflow.start_by_name(pyworkflow.get_store(), "by-name:nothing-here")
    run = await pyworkflow.wait_for_run(run_id, 20)
    assert run.status == "failed" and run.error is not None
    assert run.error["type"].endswith("WorkflowNotFoundError")
    message = run.error["message"]
    assert "'by-name:nothing-here' is not registered in this process" in message
    assert "started by name" in message and "retry the run" in message


@pytest.mark.parametrize(
    "name",
    ["", " ", "\t", "a\nb", "a\x00b", "bidi\u202eeman", "zero\u200bwidth", "x" * 257, 5, None],
)
async def test_bad_names_are_refused_and_nothing_is_written(engine: str, name: Any) -> None:
    with pytest.raises(ConfigurationError, match="workflow name"):
        await pyworkflow.start_by_name(pyworkflow.get_store(), name)
    assert await _run_ids() == []


@pytest.mark.parametrize(
    ("kwargs", "error"),
    [
        ([1, 2], ConfigurationError),
        ({1: "x"}, ConfigurationError),
        ({"n": float("nan")}, SerializationError),
        ({"n": 2**64}, SerializationError),
        ({"o": object()}, SerializationError),
        ({"big": "x" * pyworkflow.MAX_INPUT_BYTES}, SerializationError),
    ],
)
async def test_bad_inputs_are_refused_and_nothing_is_written(
    engine: str, kwargs: Any, error: type[Exception]
) -> None:
    with pytest.raises(error):
        await pyworkflow.start_by_name(pyworkflow.get_store(), "by-name:greet", kwargs)
    assert await _run_ids() == []


async def test_also_commits_with_the_run_or_not_at_all(engine: str) -> None:
    seen: list[str] = []

    def also(conn: Any, run_id: str) -> None:
        seen.append(run_id)
        raise RuntimeError("the audit entry could not be written")

    with pytest.raises(RuntimeError):
        await pyworkflow.start_by_name(pyworkflow.get_store(), "by-name:greet", {"who": "x"}, also=also)
    assert len(seen) == 1 and await _run_ids() == []
    run_id = await pyworkflow.start_by_name(
        pyworkflow.get_store(), "by-name:greet", {"who": "y"}, also=lambda conn, rid: seen.append(rid)
    )
    assert seen[-1] == run_id and await _run_ids() == [run_id]


def test_a_workflow_name_follows_the_same_grammar() -> None:
    assert pyworkflow.check_workflow_name("ops:refund v2") == "ops:refund v2"
    for bad in ("", "  ", "tab\there", "x" * 257):
        with pytest.raises(ConfigurationError, match="workflow name"):
            workflow(name=bad)
