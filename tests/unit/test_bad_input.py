"""Every public function of ``pyworkflow`` with wrong, missing, oversize and hostile input.

Each must raise a typed error of the pyworkflow tree (``TypeError`` only where Python itself
rejects a call, such as a missing argument) and change nothing: a ``resume_hook`` that is refused
leaves the wait, the run, its history and its queue row exactly as they were, and the wait can
still be resumed afterwards.
"""

from __future__ import annotations

import math
import sqlite3
from collections.abc import AsyncIterator, Callable
from pathlib import Path
from typing import Any

import pytest

import pyworkflow
from pyworkflow import (
    ConfigurationError,
    HookAlreadyReceivedError,
    HookNotFoundError,
    InvalidTokenError,
    PayloadValidationError,
    SerializationError,
    WorkflowError,
    WorkflowNotFoundError,
)

MIB = 1024 * 1024
SCHEMA = {
    "type": "object",
    "properties": {"approved": {"type": "boolean"}, "note": {"type": "string", "maxLength": 50}},
    "required": ["approved"],
    "additionalProperties": False,
}

TOKENS: dict[str, list[str]] = {}


@pyworkflow.step(max_retries=0)
async def ask(key: str, schema: dict[str, Any] | None) -> Any:
    return await pyworkflow.step_hook(
        "answer", on_created=lambda token: TOKENS.setdefault(key, []).append(token), payload_schema=schema
    )


@pyworkflow.workflow
async def asking(key: str, schema: dict[str, Any] | None = None) -> dict[str, Any]:
    return {"answer": await ask(key, schema)}


@pyworkflow.step(max_retries=0)
async def misuse_in_step(kind: str) -> Any:
    if kind == "step_hook_timeout":
        return await pyworkflow.step_hook("x", timeout="garbage")
    if kind == "step_hook_negative_timeout":
        return await pyworkflow.step_hook("x", timeout=-5)
    if kind == "step_hook_on_timeout":
        return await pyworkflow.step_hook("x", on_timeout="bogus")  # type: ignore[arg-type]
    if kind == "step_hook_name_empty":
        return await pyworkflow.step_hook("")
    if kind == "step_hook_name_not_str":
        return await pyworkflow.step_hook(None)  # type: ignore[arg-type]
    if kind == "step_hook_name_too_long":
        return await pyworkflow.step_hook("n" * 10_000)
    if kind == "step_hook_bad_schema":
        return await pyworkflow.step_hook("x", payload_schema={"type": "no-such-type"})
    if kind == "step_hook_schema_not_a_schema":
        return await pyworkflow.step_hook("x", payload_schema=42)
    if kind == "step_hook_on_created_not_callable":
        return await pyworkflow.step_hook("x", on_created="not callable")  # type: ignore[arg-type]
    if kind == "hook_in_step":
        return await pyworkflow.hook("x")
    if kind == "sleep_in_step_garbage":
        return await pyworkflow.sleep("soon")
    raise AssertionError(kind)


@pyworkflow.workflow
async def misuse(kind: str) -> Any:
    if kind == "step_hook_at_workflow_level":
        return await pyworkflow.step_hook("x")
    if kind == "save_checkpoint_at_workflow_level":
        return await pyworkflow.save_step_checkpoint({"a": 1})
    if kind == "load_checkpoint_at_workflow_level":
        return await pyworkflow.load_step_checkpoint()
    if kind == "sleep_negative":
        return await pyworkflow.sleep(-1)
    if kind == "sleep_garbage":
        return await pyworkflow.sleep("later")
    if kind == "hook_timeout_garbage":
        return await pyworkflow.hook("x", timeout="garbage")
    if kind == "hook_on_timeout":
        return await pyworkflow.hook("x", on_timeout="bogus")  # type: ignore[arg-type]
    return await misuse_in_step(kind)


@pytest.fixture
async def engine(tmp_path: Path) -> AsyncIterator[Path]:
    """pyworkflow on a fresh SQLite file (these tests read the file to prove nothing changed)."""
    db = tmp_path / "bad_input.db"
    pyworkflow.configure(storage=f"sqlite:///{db}", poll_interval=0.02)
    TOKENS.clear()
    try:
        yield db
    finally:
        await pyworkflow.shutdown()


# -- configure ---------------------------------------------------------------------------------------

BAD_CONFIGURE: list[tuple[str, dict[str, Any]]] = [
    ("storage-empty", {"storage": ""}),
    ("storage-blank", {"storage": "   "}),
    ("storage-int", {"storage": 123}),
    ("storage-bytes", {"storage": b"sqlite:///x.db"}),
    ("storage-unknown-scheme", {"storage": "mysql://db.example/x"}),
    ("storage-typo-scheme", {"storage": "sqlit:///x.db"}),
    ("storage-sqlite-no-path", {"storage": "sqlite://"}),
    ("storage-sqlite-empty-path", {"storage": "sqlite:///"}),
    ("synchronous-bogus", {"synchronous": "SOMETIMES"}),
    ("synchronous-empty", {"synchronous": ""}),
    ("synchronous-none", {"synchronous": None}),
    ("synchronous-int", {"synchronous": 2}),
    ("runtime-bogus", {"runtime": "threads"}),
    ("runtime-none", {"runtime": None}),
    ("lease_ttl-negative", {"lease_ttl": -1}),
    ("lease_ttl-zero", {"lease_ttl": 0}),
    ("lease_ttl-nan", {"lease_ttl": math.nan}),
    ("lease_ttl-inf", {"lease_ttl": math.inf}),
    ("lease_ttl-str", {"lease_ttl": "30"}),
    ("lease_ttl-bool", {"lease_ttl": True}),
    ("poll_interval-negative", {"poll_interval": -0.5}),
    ("poll_interval-nan", {"poll_interval": math.nan}),
    ("poll_interval-inf", {"poll_interval": math.inf}),
    ("max_concurrency-zero", {"max_concurrency": 0}),
    ("max_concurrency-negative", {"max_concurrency": -10}),
    ("max_concurrency-float", {"max_concurrency": 1.5}),
    ("max_concurrency-bool", {"max_concurrency": True}),
    ("max_crashes-zero", {"max_crashes": 0}),
    ("max_crashes-negative", {"max_crashes": -1}),
    ("max_crashes-str", {"max_crashes": "5"}),
    ("gc_threshold-zero", {"gc_threshold": 0}),
    ("gc_threshold-negative", {"gc_threshold": -700}),
    ("gc_threshold-float", {"gc_threshold": 5e4}),
    ("gc_threshold-str", {"gc_threshold": "50000"}),
    ("gc_threshold-bool", {"gc_threshold": True}),
    ("gc_threshold-oversize", {"gc_threshold": 2**31}),
    ("gc_threshold-huge", {"gc_threshold": 10**40}),
]


@pytest.mark.parametrize("kwargs", [k for _, k in BAD_CONFIGURE], ids=[i for i, _ in BAD_CONFIGURE])
async def test_configure_rejects_bad_settings_and_keeps_the_previous_ones(
    engine: Path, kwargs: dict[str, Any]
) -> None:
    with pytest.raises(ConfigurationError):
        pyworkflow.configure(**kwargs)
    # Nothing changed: the store is the one configured before.
    assert pyworkflow.get_store().url == f"sqlite:///{engine}"


async def test_configure_while_running_is_refused(engine: Path, tmp_path: Path) -> None:
    run_id = await pyworkflow.start(asking, "running")
    await pyworkflow.wait_for_run(run_id, 10, until=("suspended",))
    with pytest.raises(ConfigurationError):
        pyworkflow.configure(storage=f"sqlite:///{tmp_path / 'other.db'}")
    assert pyworkflow.get_store().url == f"sqlite:///{engine}"


@pytest.mark.parametrize("kind", ["directory", "not-a-database"])
async def test_storage_that_is_not_a_sqlite_database_is_a_configuration_error(
    tmp_path: Path, kind: str
) -> None:
    target = tmp_path / "target"
    if kind == "directory":
        target.mkdir()
    else:
        target.write_bytes(b"this is not a SQLite database\n" * 200)
    before = target.read_bytes() if target.is_file() else None
    pyworkflow.configure(storage=f"sqlite:///{target}")
    try:
        with pytest.raises(ConfigurationError):
            await pyworkflow.get_workflow_run("any")
    finally:
        await pyworkflow.shutdown()
    if before is not None:
        assert target.read_bytes() == before  # the foreign file is left alone


# -- start --------------------------------------------------------------------------------------------


async def _plain_async() -> None:
    return None


def _circular() -> list[Any]:
    items: list[Any] = []
    items.append(items)
    return items


def _nested(levels: int, leaf: Any = "bottom") -> Any:
    """``levels`` lists around ``leaf``: nesting depth ``levels + 1``."""
    value: Any = leaf
    for _ in range(levels):
        value = [value]
    return value


NOT_WORKFLOWS: list[tuple[str, Any]] = [
    ("none", None),
    ("string", "tests.unit.test_bad_input:asking"),
    ("plain-async-function", _plain_async),
    ("lambda", lambda: None),
    ("a-step", ask),
    ("the-module", pyworkflow),
]


@pytest.mark.parametrize("target", [t for _, t in NOT_WORKFLOWS], ids=[i for i, _ in NOT_WORKFLOWS])
async def test_start_refuses_what_is_not_a_workflow(engine: Path, target: Any) -> None:
    with pytest.raises(ConfigurationError):
        await pyworkflow.start(target, "x")
    assert await pyworkflow.get_store().list_runs() == []


NON_JSON_ARGS: list[tuple[str, tuple[Any, ...], dict[str, Any]]] = [
    ("object", (object(),), {}),
    ("set", ({1, 2},), {}),
    ("bytes", (b"raw",), {}),
    ("int-keys", ({1: "one"},), {}),
    ("huge-int", (2**70,), {}),
    ("int-past-64-bits", ({"account": 2**64 + 1},), {}),
    ("int-below-64-bits", ([-(2**63) - 1],), {}),
    ("nan", (math.nan,), {}),
    ("inf-kwarg", ("k",), {"schema": {"maximum": math.inf}}),
    ("-inf-nested", ({"limits": [0, -math.inf]},), {}),
    ("circular", (_circular(),), {}),
    ("nested-1000", (_nested(1000),), {}),
    ("function", (_plain_async,), {}),
    ("kwarg-object", ("k",), {"schema": object()}),
]


@pytest.mark.parametrize(
    ("args", "kwargs"), [(a, k) for _, a, k in NON_JSON_ARGS], ids=[i for i, _, _ in NON_JSON_ARGS]
)
async def test_start_with_non_json_arguments_records_nothing(
    engine: Path, args: tuple[Any, ...], kwargs: dict[str, Any]
) -> None:
    with pytest.raises(SerializationError):
        await pyworkflow.start(asking, *args, **kwargs)
    assert await pyworkflow.get_store().list_runs() == []


async def test_start_with_missing_arguments_fails_the_run_not_the_engine(engine: Path) -> None:
    run_id = await pyworkflow.start(asking)  # `key` is missing: known only when the workflow runs
    run = await pyworkflow.wait_for_run(run_id, 10)
    assert run.status == "failed"
    assert run.error is not None and run.error["type"] == "builtins.TypeError"


async def test_missing_arguments_are_python_type_errors(engine: Path) -> None:
    with pytest.raises(TypeError):
        await pyworkflow.start()  # type: ignore[call-arg]
    with pytest.raises(TypeError):
        await pyworkflow.resume_hook()  # type: ignore[call-arg]
    with pytest.raises(TypeError):
        await pyworkflow.get_workflow_run()  # type: ignore[call-arg]
    with pytest.raises(TypeError):
        await pyworkflow.step_hook()  # type: ignore[call-arg]
    assert await pyworkflow.get_store().list_runs() == []


# -- resume_hook: a parked run, and refusals that change nothing ---------------------------------------


async def _park(key: str, schema: dict[str, Any] | None = None) -> tuple[str, str, str]:
    """A run suspended on a step hook: (run id, hook id, token)."""
    run_id = await pyworkflow.start(asking, key, schema)
    await pyworkflow.wait_for_run(run_id, 10, until=("suspended",))
    # The suspended turn's end (its lease, the notified mark) is written without waiting: commit
    # it before the snapshot that every refused call must leave unchanged.
    await pyworkflow.get_store().database.check_writable()
    (pending,) = [h for h in await pyworkflow.list_pending_hooks() if h.run_id == run_id]
    (token,) = TOKENS[key]
    return run_id, pending.hook_id, token


async def _snapshot(run_id: str, hook_id: str) -> tuple[Any, ...]:
    """Everything a resume could touch: the wait, the run, its history, its queue row, the tokens."""
    store = pyworkflow.get_store()
    wait = await store.get_wait(hook_id)
    run = await pyworkflow.get_workflow_run(run_id)
    events = [(e.seq, e.type, e.key) for e in await pyworkflow.get_workflow_events(run_id)]
    reader = store.db.reader()  # type: ignore[attr-defined]
    queue = reader.execute("SELECT * FROM queue WHERE run_id = ?", (run_id,)).fetchall()
    tokens = reader.execute("SELECT COUNT(*) FROM wait_tokens").fetchone()
    return (wait, run.status, run.updated_at, events, queue, tokens)


async def _still_resumable(run_id: str, token: str, payload: Any = None) -> None:
    """The refused attempts left the hook usable: a good payload completes the run."""
    payload = {"approved": True, "note": "finally"} if payload is None else payload
    result = await pyworkflow.resume_hook(token, payload)
    assert result.run_id == run_id and result.status == "received"
    run = await pyworkflow.wait_for_run(run_id, 10)
    assert run.status == "completed" and run.result == {"answer": payload}


WELL_FORMED_UNKNOWN = "pwh_" + "A" * 32

BAD_TOKENS: list[tuple[str, Any, type[WorkflowError]]] = [
    ("none", None, InvalidTokenError),
    ("int", 123, InvalidTokenError),
    ("bytes", b"pwh_" + b"a" * 32, InvalidTokenError),
    ("list", ["pwh_" + "a" * 32], InvalidTokenError),
    ("dict", {"token": "pwh_" + "a" * 32}, InvalidTokenError),
    ("empty", "", InvalidTokenError),
    ("no-prefix", "a" * 36, InvalidTokenError),
    ("prefix-only", "pwh_", InvalidTokenError),
    ("upper-prefix", "PWH_" + "a" * 32, InvalidTokenError),
    ("too-short", "pwh_" + "a" * 31, InvalidTokenError),
    ("too-long", "pwh_" + "a" * 33, InvalidTokenError),
    ("bad-chars", "pwh_" + "!" * 32, InvalidTokenError),
    ("sql", "pwh_' OR 1=1; DROP TABLE waits; --", InvalidTokenError),
    ("leading-space", " pwh_" + "a" * 32, InvalidTokenError),
    ("trailing-newline", "pwh_" + "a" * 32 + "\n", InvalidTokenError),
    ("trailing-nul", "pwh_" + "a" * 32 + "\x00", InvalidTokenError),
    ("ten-megabytes", "pwh_" + "a" * 10_000_000, InvalidTokenError),
    ("unicode", "pwh_" + "ä" * 32, InvalidTokenError),
    ("unknown-well-formed", WELL_FORMED_UNKNOWN, HookNotFoundError),
]


@pytest.mark.parametrize(
    ("token", "error"), [(t, e) for _, t, e in BAD_TOKENS], ids=[i for i, _, _ in BAD_TOKENS]
)
async def test_resume_hook_with_a_bad_token_changes_nothing(
    engine: Path, token: Any, error: type[WorkflowError]
) -> None:
    run_id, hook_id, real = await _park("bad-token")
    before = await _snapshot(run_id, hook_id)
    with pytest.raises(error):
        await pyworkflow.resume_hook(token, {"approved": True})
    assert await _snapshot(run_id, hook_id) == before
    await _still_resumable(run_id, real)


async def test_resume_hook_with_the_real_token_decorated_is_refused(engine: Path) -> None:
    """Near misses of a real token (a newline after it, a changed character) never resume it."""
    run_id, hook_id, real = await _park("near-miss")
    before = await _snapshot(run_id, hook_id)
    flipped = real[:-1] + ("A" if real[-1] != "A" else "B")
    for near in (real + "\n", real + " ", " " + real, real.upper(), real[:-1], flipped):
        with pytest.raises((InvalidTokenError, HookNotFoundError)):
            await pyworkflow.resume_hook(near, {"approved": False})
    with pytest.raises(InvalidTokenError):
        await pyworkflow.resume_hook(real + "\n", {"approved": False})
    assert await _snapshot(run_id, hook_id) == before
    await _still_resumable(run_id, real)


BAD_PAYLOADS: list[tuple[str, Callable[[], Any], tuple[type[WorkflowError], ...]]] = [
    ("over-1-MiB", lambda: "x" * MIB, (PayloadValidationError,)),
    ("over-1-MiB-dict", lambda: {f"k{i}": "v" * 1000 for i in range(1100)}, (PayloadValidationError,)),
    ("depth-65", lambda: _nested(64), (PayloadValidationError,)),
    ("depth-200-dicts", lambda: _deep_dict(200), (PayloadValidationError,)),
    # Deeper than the JSON encoder goes: refused as not serializable, or as too deep.
    ("depth-100000", lambda: _nested(100_000), (PayloadValidationError, SerializationError)),
    ("object", object, (SerializationError,)),
    ("set", lambda: {1, 2}, (SerializationError,)),
    ("bytes", lambda: b"\x00\xff", (SerializationError,)),
    ("int-keys", lambda: {1: "x"}, (SerializationError,)),
    ("huge-int", lambda: 2**70, (SerializationError,)),
    ("int-past-64-bits", lambda: {"account": 18446744073709551617}, (SerializationError,)),
    ("int-below-64-bits", lambda: {"account": -(2**63) - 1}, (SerializationError,)),
    ("nan", lambda: math.nan, (SerializationError,)),
    ("nan-nested", lambda: {"approved": True, "scores": [1.0, math.nan]}, (SerializationError,)),
    ("inf", lambda: {"approved": True, "limit": math.inf}, (SerializationError,)),
    ("-inf", lambda: (-math.inf,), (SerializationError,)),
    ("circular", _circular, (SerializationError,)),
    ("exception", lambda: ValueError("x"), (SerializationError,)),
]


def _deep_dict(levels: int) -> Any:
    value: Any = {"leaf": True}
    for _ in range(levels):
        value = {"d": value}
    return value


@pytest.mark.parametrize(
    ("make", "errors"), [(m, e) for _, m, e in BAD_PAYLOADS], ids=[i for i, _, _ in BAD_PAYLOADS]
)
async def test_resume_hook_with_a_bad_payload_changes_nothing(
    engine: Path, make: Callable[[], Any], errors: tuple[type[WorkflowError], ...]
) -> None:
    run_id, hook_id, token = await _park("bad-payload")
    before = await _snapshot(run_id, hook_id)
    with pytest.raises(errors):
        await pyworkflow.resume_hook(token, make())
    assert await _snapshot(run_id, hook_id) == before
    await _still_resumable(run_id, token)


async def test_a_number_json_would_not_keep_is_refused_naming_where(engine: Path) -> None:
    """Integers beyond 64 bits and NaN/Infinity are refused, not turned into floats or null; the
    error says which value and where in it."""
    run_id, hook_id, token = await _park("inexact")
    before = await _snapshot(run_id, hook_id)
    with pytest.raises(SerializationError) as big:
        await pyworkflow.resume_hook(token, {"account": 18446744073709551617})
    assert str(big.value).startswith("payload cannot be stored as JSON: $.account: the integer ")
    assert "18446744073709551617" in str(big.value)
    with pytest.raises(SerializationError) as nan:
        await pyworkflow.resume_hook_by_id(hook_id, {"rows": [{"ratio": 0.5}, {"ratio": math.nan}]})
    assert str(nan.value).startswith("payload cannot be stored as JSON: $.rows[1].ratio: nan ")
    assert await _snapshot(run_id, hook_id) == before
    # The ends of the range are kept exactly, as integers.
    await _still_resumable(run_id, token, {"max": 2**64 - 1, "min": -(2**63), "big": 1e308})


async def test_payload_limits_are_inclusive(engine: Path) -> None:
    """Exactly 1 MiB serialized and exactly 64 levels deep are accepted."""
    run_id, _, token = await _park("one-mib")
    biggest = "x" * (MIB - 2)  # plus two quotes
    await _still_resumable(run_id, token, biggest)

    run_id, _, token = await _park("depth-64")
    await _still_resumable(run_id, token, _nested(63))


SCHEMA_VIOLATIONS: list[tuple[str, Any]] = [
    ("missing-required", {}),
    ("wrong-type", {"approved": "yes"}),
    ("extra-property", {"approved": True, "admin": True}),
    ("too-long", {"approved": True, "note": "n" * 51}),
    ("not-an-object", ["approved"]),
    ("null", None),
]


@pytest.mark.parametrize("payload", [p for _, p in SCHEMA_VIOLATIONS], ids=[i for i, _ in SCHEMA_VIOLATIONS])
async def test_resume_hook_with_a_payload_failing_the_schema_changes_nothing(
    engine: Path, payload: Any
) -> None:
    run_id, hook_id, token = await _park("schema", SCHEMA)
    before = await _snapshot(run_id, hook_id)
    with pytest.raises(PayloadValidationError):
        await pyworkflow.resume_hook(token, payload)
    assert await _snapshot(run_id, hook_id) == before
    await _still_resumable(run_id, token)


async def test_resume_hook_twice_is_refused_and_keeps_the_first_payload(engine: Path) -> None:
    run_id, hook_id, token = await _park("twice")
    await _still_resumable(run_id, token, {"approved": True, "note": "first"})
    before = await _snapshot(run_id, hook_id)
    with pytest.raises(HookAlreadyReceivedError):
        await pyworkflow.resume_hook(token, {"approved": False, "note": "second"})
    assert await _snapshot(run_id, hook_id) == before
    run = await pyworkflow.get_workflow_run(run_id)
    assert run.result == {"answer": {"approved": True, "note": "first"}}


# -- ids: get_workflow_run, get_workflow_events, cancel_workflow, wait_for_run, resume_hook_by_id ------

BAD_IDS: list[tuple[str, Any]] = [
    ("none", None),
    ("int", 123),
    ("bytes", b"run"),
    ("list", ["run"]),
    ("empty", ""),
    ("unknown", "no-such-run"),
    ("ten-kilobytes", "r" * 10_000),
    ("sql", "' OR 1=1; --"),
    ("nul", "\x00"),
    ("wildcard", "%"),
]


@pytest.mark.parametrize("bad_id", [b for _, b in BAD_IDS], ids=[i for i, _ in BAD_IDS])
async def test_run_lookups_with_bad_ids(engine: Path, bad_id: Any) -> None:
    run_id, hook_id, token = await _park("bystander")  # a real run that must stay untouched
    before = await _snapshot(run_id, hook_id)
    with pytest.raises(WorkflowNotFoundError):
        await pyworkflow.get_workflow_run(bad_id)
    with pytest.raises(WorkflowNotFoundError):
        await pyworkflow.get_workflow_events(bad_id)
    with pytest.raises(WorkflowNotFoundError):
        await pyworkflow.cancel_workflow(bad_id)
    with pytest.raises(WorkflowNotFoundError):
        await pyworkflow.wait_for_run(bad_id, 1)
    with pytest.raises(HookNotFoundError):
        await pyworkflow.resume_hook_by_id(bad_id, {"approved": True})
    assert await _snapshot(run_id, hook_id) == before
    await _still_resumable(run_id, token)


async def test_resume_hook_by_id_refusals_change_nothing(engine: Path) -> None:
    run_id, hook_id, _ = await _park("by-id", SCHEMA)
    before = await _snapshot(run_id, hook_id)
    for payload, error in (
        ({"approved": "no"}, PayloadValidationError),
        ("x" * MIB, PayloadValidationError),
        (object(), SerializationError),
        ({"approved": True, "score": math.nan}, SerializationError),
        ({"approved": True, "account": 2**64 + 1}, SerializationError),
    ):
        with pytest.raises(error):
            await pyworkflow.resume_hook_by_id(hook_id, payload)
    assert await _snapshot(run_id, hook_id) == before


async def test_wait_for_run_with_an_unknown_status(engine: Path) -> None:
    run_id, _, _ = await _park("until")
    with pytest.raises(ConfigurationError):
        await pyworkflow.wait_for_run(run_id, 1, until=("finished",))


@pytest.mark.parametrize(
    "limit", [-1, "10", None, 1.5, True], ids=["negative", "str", "none", "float", "bool"]
)
async def test_list_pending_hooks_with_a_bad_limit(engine: Path, limit: Any) -> None:
    await _park("listed")
    with pytest.raises(ConfigurationError):
        await pyworkflow.list_pending_hooks(limit)


@pyworkflow.workflow
async def napping() -> None:
    await pyworkflow.sleep("1h")


async def test_list_pending_hooks_limit_counts_hooks_only(engine: Path) -> None:
    """Pending sleep timers older than the hooks must not eat the limit: an inbox asking for the
    oldest hook gets it."""
    for _ in range(3):
        nap = await pyworkflow.start(napping)
        await pyworkflow.wait_for_run(nap, 10, until=("suspended",))
    run_id, hook_id, _ = await _park("after-timers")
    assert [h.hook_id for h in await pyworkflow.list_pending_hooks(1)] == [hook_id]
    assert [h.run_id for h in await pyworkflow.list_pending_hooks()] == [run_id]
    assert await pyworkflow.list_pending_hooks(0) == []


# -- decorators -----------------------------------------------------------------------------------------


def _sync(x: int) -> int:
    return x


async def _agen() -> Any:
    yield 1


class _Callable:
    def __call__(self) -> None:
        return None


NOT_ASYNC: list[tuple[str, Any]] = [
    ("sync-function", _sync),
    ("lambda", lambda: None),
    ("builtin", len),
    ("class", _Callable),
    ("callable-instance", _Callable()),
]


@pytest.mark.parametrize("fn", [f for _, f in NOT_ASYNC], ids=[i for i, _ in NOT_ASYNC])
def test_decorators_refuse_non_async_functions(fn: Any) -> None:
    with pytest.raises(ConfigurationError):
        pyworkflow.step(fn)
    with pytest.raises(ConfigurationError):
        pyworkflow.step(max_retries=1)(fn)
    with pytest.raises(ConfigurationError):
        pyworkflow.workflow(fn)
    with pytest.raises(ConfigurationError):
        pyworkflow.workflow(name="not-async")(fn)


def test_decorators_refuse_what_is_not_callable() -> None:
    for thing in ("review", 42, 3.5, ["x"]):
        with pytest.raises(ConfigurationError):
            pyworkflow.step(thing)
        with pytest.raises(ConfigurationError):
            pyworkflow.workflow(thing)


def test_generator_option_must_match_the_function() -> None:
    with pytest.raises(ConfigurationError):
        pyworkflow.step(is_generator=True)(_plain_async)
    with pytest.raises(ConfigurationError):
        pyworkflow.step(is_generator=False)(_agen)
    with pytest.raises(ConfigurationError):
        pyworkflow.workflow(_agen)


BAD_STEP_OPTIONS: list[tuple[str, dict[str, Any]]] = [
    ("max_retries-negative", {"max_retries": -1}),
    ("max_retries-float", {"max_retries": 1.5}),
    ("max_retries-bool", {"max_retries": True}),
    ("max_retries-str", {"max_retries": "3"}),
    ("retry_delay-negative", {"retry_delay": -1}),
    ("retry_delay-garbage", {"retry_delay": "soon"}),
    ("retry_delay-nan", {"retry_delay": math.nan}),
    ("retry_delay-none", {"retry_delay": None}),
    ("backoff-below-one", {"backoff": 0.5}),
    ("backoff-str", {"backoff": "2"}),
    ("backoff-bool", {"backoff": True}),
    ("max_delay-negative", {"max_delay": -1}),
    ("max_delay-inf", {"max_delay": math.inf}),
    ("timeout-zero", {"timeout": 0}),
    ("timeout-negative", {"timeout": -5}),
    ("timeout-garbage", {"timeout": "garbage"}),
    ("timeout-unit-only", {"timeout": "h"}),
    ("timeout-nan", {"timeout": math.nan}),
    ("timeout-list", {"timeout": [1]}),
    ("name-int", {"name": 123}),
    ("name-list", {"name": ["a"]}),
]


@pytest.mark.parametrize("options", [o for _, o in BAD_STEP_OPTIONS], ids=[i for i, _ in BAD_STEP_OPTIONS])
def test_step_refuses_bad_options(options: dict[str, Any]) -> None:
    with pytest.raises(ConfigurationError):
        pyworkflow.step(**options)(_plain_async)


@pytest.mark.parametrize("name", [123, ["a"], b"name"], ids=["int", "list", "bytes"])
def test_workflow_refuses_a_name_that_is_not_a_string(name: Any) -> None:
    async def unnamed() -> None:
        return None

    with pytest.raises(ConfigurationError):
        pyworkflow.workflow(name=name)(unnamed)


def test_workflow_refuses_a_function_and_options_together() -> None:
    with pytest.raises(ConfigurationError):
        pyworkflow.workflow(_plain_async, name="x")  # type: ignore[call-overload]


# -- waits and checkpoints outside their scope, and bad options inside ---------------------------------


async def test_step_apis_outside_a_workflow_are_configuration_errors() -> None:
    with pytest.raises(ConfigurationError):
        await pyworkflow.step_hook("review")
    with pytest.raises(ConfigurationError):
        await pyworkflow.step_hook("review", timeout="garbage", on_timeout="bogus")  # type: ignore[arg-type]
    with pytest.raises(ConfigurationError):
        await pyworkflow.hook("review")
    with pytest.raises(ConfigurationError):
        await pyworkflow.save_step_checkpoint({"state": 1})
    with pytest.raises(ConfigurationError):
        await pyworkflow.load_step_checkpoint()
    with pytest.raises(ConfigurationError):
        await pyworkflow.delete_step_checkpoint()


BAD_DURATIONS: list[tuple[str, Any]] = [
    ("negative", -1),
    ("negative-str", "-5s"),
    ("garbage", "soon"),
    ("unit-only", "s"),
    ("unknown-unit", "5y"),
    ("empty", ""),
    ("none", None),
    ("nan", math.nan),
    ("inf", math.inf),
    ("bool", True),
    ("list", [1]),
]


@pytest.mark.parametrize("duration", [d for _, d in BAD_DURATIONS], ids=[i for i, _ in BAD_DURATIONS])
async def test_sleep_outside_a_workflow_refuses_bad_durations(duration: Any) -> None:
    with pytest.raises(ConfigurationError):
        await pyworkflow.sleep(duration)


MISUSES = [
    "step_hook_at_workflow_level",
    "save_checkpoint_at_workflow_level",
    "load_checkpoint_at_workflow_level",
    "sleep_negative",
    "sleep_garbage",
    "hook_timeout_garbage",
    "hook_on_timeout",
    "step_hook_timeout",
    "step_hook_negative_timeout",
    "step_hook_on_timeout",
    "step_hook_name_empty",
    "step_hook_name_not_str",
    "step_hook_name_too_long",
    "step_hook_bad_schema",
    "step_hook_schema_not_a_schema",
    "step_hook_on_created_not_callable",
    "hook_in_step",
    "sleep_in_step_garbage",
]


@pytest.mark.parametrize("kind", MISUSES)
async def test_misuse_inside_a_run_fails_it_with_a_configuration_error(engine: Path, kind: str) -> None:
    run_id = await pyworkflow.start(misuse, kind)
    run = await pyworkflow.wait_for_run(run_id, 10)
    assert run.status == "failed", run
    assert run.error is not None
    assert run.error["type"] == "pyworkflow.ConfigurationError", run.error["message"]
    # Refused before anything was recorded: no wait was created for the bad call.
    conn = sqlite3.connect(engine)
    try:
        waits = conn.execute("SELECT kind, name FROM waits WHERE run_id = ?", (run_id,)).fetchall()
    finally:
        conn.close()
    assert waits == []
