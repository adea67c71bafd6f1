"""What a run stores is JSON, and it comes back exactly: numbers JSON would not keep (integers
beyond 64 bits, NaN, ±Infinity) are refused where they enter, naming the value and where in it,
instead of coming back as floats or null."""

from __future__ import annotations

import enum
import math
from dataclasses import dataclass
from datetime import UTC, datetime
from typing import Any

import pytest

import pyworkflow
from pyworkflow import RunStatus, SerializationError, _serde, start, step, wait_for_run, workflow

# -- the rule, on its own ----------------------------------------------------------------------------

EXACT = [
    0,
    -1,
    2**63 - 1,
    2**63,
    2**64 - 1,
    -(2**63),
    1.5,
    -0.0,
    1e308,
    5e-324,
    "NaN",
    None,
    True,
    {"a": [1, {"b": None}], "c d": ""},
]


@pytest.mark.parametrize("value", EXACT, ids=repr)
def test_values_json_keeps_come_back_exactly(value: Any) -> None:
    decoded = _serde.loads(_serde.dumps(value))
    assert decoded == value and type(decoded) is type(value)


@dataclass
class Reading:
    sensor: str
    value: float


class Limit(enum.Enum):
    NONE = math.inf


INEXACT: list[tuple[str, Any, str]] = [
    ("2**64", 2**64, "$: the integer 18446744073709551616 does not fit in 64 bits"),
    ("-2**63-1", -(2**63) - 1, "$: the integer -9223372036854775809 does not fit in 64 bits"),
    ("2**4000", 2**4000, "$: an integer of 4001 bits does not fit in 64 bits"),
    ("in-object", {"account": 18446744073709551617}, "$.account: the integer 18446744073709551617 does"),
    ("nan", math.nan, "$: nan is not a JSON number"),
    ("inf-in-list", [1.0, math.inf], "$[1]: inf is not a JSON number"),
    ("-inf-deep", {"rows": [{"x": 1}, {"x": -math.inf}]}, "$.rows[1].x: -inf is not a JSON number"),
    ("odd-key", {"odd key": (0, math.nan)}, '$["odd key"][1]: nan is not a JSON number'),
    ("dataclass", [Reading("t1", math.nan)], "$[0].value: nan is not a JSON number"),
    ("enum", {"limit": Limit.NONE}, "$.limit: inf is not a JSON number"),
]


@pytest.mark.parametrize(("value", "message"), [c[1:] for c in INEXACT], ids=[c[0] for c in INEXACT])
def test_numbers_json_would_not_keep_are_refused_naming_where(value: Any, message: str) -> None:
    with pytest.raises(SerializationError) as refused:
        _serde.dumps(value, what="the value")
    assert str(refused.value).startswith(f"the value cannot be stored as JSON: {message}")


def test_numpy_values_are_checked_too() -> None:
    """orjson writes numpy arrays and scalars (OPT_SERIALIZE_NUMPY), NaN among them as null."""
    import numpy as np

    assert _serde.loads(_serde.dumps({"v": np.array([1.5, 2.0])})) == {"v": [1.5, 2.0]}
    with pytest.raises(SerializationError, match=r"\$\.v\[1\]\[0\]: nan is not"):
        _serde.dumps({"v": np.array([[1.0], [np.nan]])})
    with pytest.raises(SerializationError, match=r"\$\.s: inf is not"):
        _serde.dumps({"s": np.float32("inf")})


# -- where a run stores values -----------------------------------------------------------------------


@step(max_retries=0)
async def measure(kind: str) -> Any:
    if kind == "nan-result":
        return {"ratio": math.nan}
    if kind == "big-result":
        return [1, 2**64]
    if kind == "nan-checkpoint":
        await pyworkflow.save_step_checkpoint({"progress": math.inf})
    return "unreachable"


@workflow
async def measuring(kind: str) -> Any:
    if kind == "inf-workflow-result":
        return {"total": -math.inf}
    return await measure(kind)


@pytest.mark.parametrize(
    ("kind", "what"),
    [
        ("nan-result", "result of step 'measure' cannot be stored as JSON: $.ratio: nan"),
        ("big-result", "result of step 'measure' cannot be stored as JSON: $[1]: the integer 1844674"),
        ("nan-checkpoint", "checkpoint of step measure#1 cannot be stored as JSON: $.progress: inf"),
        ("inf-workflow-result", "workflow result cannot be stored as JSON: $.total: -inf"),
    ],
    ids=["step-result-nan", "step-result-2**64", "checkpoint-inf", "workflow-result--inf"],
)
async def test_a_run_refuses_to_store_what_would_not_come_back(engine: str, kind: str, what: str) -> None:
    run_id = await start(measuring, kind)
    run = await wait_for_run(run_id, 10)
    assert run.status == RunStatus.FAILED
    assert run.error is not None and run.error["type"] == "pyworkflow.SerializationError"
    assert run.error["message"].startswith(what), run.error["message"]
    events = [e.type for e in await pyworkflow.get_workflow_events(run_id)]
    assert "step_completed" not in events  # nothing was recorded as the step's result
    store = pyworkflow.get_store()
    state = await store.load_state(run_id)  # type: ignore[attr-defined]
    assert state.checkpoints == {} and all(r.result is None for r in state.steps.values())


# -- a step's result: the first pass sees what replay will see ---------------------------------------


class Colour(enum.Enum):
    RED = "red"


@dataclass
class Point:
    x: int
    y: int


SEEN: list[tuple[str, Any]] = []
TOKENS: list[str] = []


@step
async def shapes() -> Any:
    return {
        "pair": (1, 2),
        "nested": [(3, (4,))],
        "point": Point(5, 6),
        "colour": Colour.RED,
        "when": datetime(2026, 1, 2, 3, 4, 5, tzinfo=UTC),
    }


@workflow
async def branching() -> Any:
    value = await shapes()
    # A workflow that branches on what the step returned must go the same way on every pass.
    SEEN.append(("tuple" if isinstance(value["pair"], tuple) else "list", value))
    await pyworkflow.hook("go", on_created=TOKENS.append)
    return value


JSON_FORM = {
    "pair": [1, 2],
    "nested": [[3, [4]]],
    "point": {"x": 5, "y": 6},
    "colour": "red",
    "when": "2026-01-02T03:04:05+00:00",
}


async def test_a_step_result_is_its_json_form_on_the_first_pass_and_on_replay(engine: str) -> None:
    SEEN.clear()
    TOKENS.clear()
    run_id = await start(branching)
    await wait_for_run(run_id, 10, until=("suspended",))
    await pyworkflow.resume_hook(TOKENS[0], None)
    run = await wait_for_run(run_id, 10)
    assert run.status == RunStatus.COMPLETED
    assert [branch for branch, _ in SEEN] == ["list", "list"]  # first pass, then replay
    first, replayed = (value for _, value in SEEN)
    assert first == replayed == run.result == JSON_FORM
    assert repr(first) == repr(replayed)  # the same types all the way down


@step(max_retries=0)
async def keyed_by_int() -> Any:
    return {1: "one"}


@workflow
async def int_keys() -> Any:
    return await keyed_by_int()


async def test_a_step_result_with_int_keys_is_refused_not_turned_into_strings(engine: str) -> None:
    run = await wait_for_run(await start(int_keys), 10)
    assert run.status == RunStatus.FAILED and run.error is not None
    assert run.error["type"] == "pyworkflow.SerializationError"
    assert run.error["message"].startswith("result of step 'keyed_by_int' cannot be stored as JSON")


# -- a hook's payload: checked and delivered in its JSON form ----------------------------------------


@workflow
async def waiting_for_a_list() -> Any:
    payload = await pyworkflow.hook("rows", on_created=TOKENS.append, payload_schema={"type": "array"})
    return {"payload": payload, "is_list": isinstance(payload, list)}


@pytest.mark.parametrize("by", ["token", "id"])
async def test_a_payload_is_checked_against_its_schema_in_the_form_the_workflow_receives(
    engine: str, by: str
) -> None:
    """A tuple is stored as a JSON array, so a schema asking for an array accepts it."""
    TOKENS.clear()
    run_id = await start(waiting_for_a_list)
    await wait_for_run(run_id, 10, until=("suspended",))
    if by == "token":
        await pyworkflow.resume_hook(TOKENS[0], (1, (2, 3)))
    else:
        (pending,) = await pyworkflow.list_pending_hooks()
        await pyworkflow.resume_hook_by_id(pending.hook_id, (1, (2, 3)))
    run = await wait_for_run(run_id, 10)
    assert run.status == RunStatus.COMPLETED, run.error
    assert run.result == {"payload": [1, [2, 3]], "is_list": True}
