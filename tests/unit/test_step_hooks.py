"""Step hooks and checkpoints: the spec's review_step, deterministic hook identity, decisions that
arrive early, and the wait's single transition out of 'pending'."""

from __future__ import annotations

import asyncio
import time
from typing import Any

import pytest

import pyworkflow
from pyworkflow import (
    STEP_HOOK_TIMEOUT,
    HookAlreadyReceivedError,
    HookExpiredError,
    RunStatus,
    delete_step_checkpoint,
    hook,
    load_step_checkpoint,
    resume_hook,
    save_step_checkpoint,
    start,
    step,
    step_hook,
    wait_for_run,
    workflow,
)
from pyworkflow.store import WaitStatus

CALLS: dict[str, int] = {}
TOKENS: dict[str, list[str]] = {}


def count(name: str) -> None:
    CALLS[name] = CALLS.get(name, 0) + 1


@pytest.fixture(autouse=True)
def _reset() -> None:
    CALLS.clear()
    TOKENS.clear()


async def next_token(key: str, timeout: float = 5.0) -> str:
    deadline = time.monotonic() + timeout
    while not TOKENS.get(key):
        if time.monotonic() > deadline:
            raise AssertionError(f"no token for {key!r} within {timeout} s")
        await asyncio.sleep(0.005)
    return TOKENS[key].pop(0)


def deliver(key: str) -> Any:
    async def on_created(token: str) -> None:
        count(f"on_created:{key}")
        TOKENS.setdefault(key, []).append(token)

    return on_created


# -- 1. the spec's review_step -----------------------------------------------------------------


async def expensive_setup(draft: str) -> dict[str, Any]:
    count("expensive_setup")
    return {"draft": draft, "size": len(draft)}


SEEN_CHECKPOINTS: list[Any] = []


@step
async def review_step(draft: str) -> dict[str, Any]:
    checkpoint = await load_step_checkpoint()
    SEEN_CHECKPOINTS.append(checkpoint)
    if checkpoint is None:
        state = await expensive_setup(draft)
        await save_step_checkpoint({"state": state})
    else:
        state = checkpoint["state"]
    feedback = await step_hook(
        "human_review", timeout="24h", on_created=deliver("review"), on_timeout="return"
    )
    if feedback is STEP_HOOK_TIMEOUT:
        return {"state": state, "feedback": None}
    result = {"state": state, "feedback": feedback}
    await delete_step_checkpoint()
    return result


@workflow
async def review_flow(draft: str) -> dict[str, Any]:
    return await review_step(draft)


async def test_review_step_runs_as_the_spec_describes(engine: str) -> None:
    SEEN_CHECKPOINTS.clear()
    run_id = await start(review_flow, "hello world")
    token = await next_token("review")
    run = await wait_for_run(run_id, 5, until=("suspended",))
    assert run.status == RunStatus.SUSPENDED
    state = await pyworkflow.get_store().load_state(run_id)
    (checkpoint,) = state.checkpoints.values()
    assert checkpoint.revision == 1
    assert CALLS == {"expensive_setup": 1, "on_created:review": 1}

    result = await resume_hook(token, {"approved": True})
    assert result.run_id == run_id and result.hook_name == "human_review"
    run = await wait_for_run(run_id, 5)
    assert run.status == RunStatus.COMPLETED, run.error
    assert run.result == {"state": {"draft": "hello world", "size": 11}, "feedback": {"approved": True}}
    assert SEEN_CHECKPOINTS == [None, {"state": {"draft": "hello world", "size": 11}}]
    assert CALLS == {"expensive_setup": 1, "on_created:review": 1}
    assert (await pyworkflow.get_store().load_state(run_id)).checkpoints == {}
    types = [e.type for e in await pyworkflow.get_workflow_events(run_id)]
    assert types.count("checkpoint_saved") == 1 and types.count("checkpoint_deleted") == 1
    assert types[0] == "run_created" and types[-1] == "run_completed"


# -- 2. completed steps are replayed, and recorded once -----------------------------------------


@step
async def prepare(n: int) -> dict[str, int]:
    count("prepare")
    return {"n": n, "double": n * 2}


@step
async def wait_for_answer() -> Any:
    return await step_hook("answer", on_created=deliver("answer"))


@workflow
async def prepare_then_wait(n: int) -> dict[str, Any]:
    prepared = await prepare(n)
    answer = await wait_for_answer()
    again = await prepare(n + 1)
    return {"prepared": prepared, "answer": answer, "again": again}


async def test_completed_steps_are_replayed_not_re_executed(engine: str) -> None:
    run_id = await start(prepare_then_wait, 4)
    token = await next_token("answer")
    await wait_for_run(run_id, 5, until=("suspended",))
    assert CALLS["prepare"] == 1
    await resume_hook(token, "yes")
    run = await wait_for_run(run_id, 5)
    assert run.result == {"prepared": {"n": 4, "double": 8}, "answer": "yes", "again": {"n": 5, "double": 10}}
    assert CALLS["prepare"] == 2  # once per call site, never again on replay
    events = await pyworkflow.get_workflow_events(run_id)
    completed = [e.key for e in events if e.type == "step_completed"]
    assert completed == ["prepare#1", "wait_for_answer#1", "prepare#2"]


async def test_a_second_completion_of_a_step_is_refused(engine: str) -> None:
    run_id = await start(prepare_then_wait, 1)
    await next_token("answer")
    await wait_for_run(run_id, 5, until=("suspended",))
    store = pyworkflow.get_store()
    # A duplicate delivery: another worker claims the run and tries to record prepare#1 again.
    await resume_hook_for_claim(run_id)
    (claim,) = await store.claim("dup-worker", limit=1, now=time.time(), lease_ttl=30, max_crashes=5)
    with pytest.raises(pyworkflow.StepAlreadyCompletedError):
        await store.complete_step(claim.fence, "prepare#1", b'{"n": 99}', now=time.time())
    state = await store.load_state(run_id)
    assert state.steps["prepare#1"].result is not None
    assert pyworkflow._serde.loads(state.steps["prepare#1"].result) == {"n": 1, "double": 2}


async def resume_hook_for_claim(run_id: str) -> None:
    """Stop the in-process runtime so that the test can claim the run by hand."""
    from pyworkflow import _api

    if _api._runtime is not None:
        await _api._runtime.stop()
    store = pyworkflow.get_store()
    waits = await store.list_waits()
    wait = next(w for w in waits if w.run_id == run_id)
    await store.resolve_wait(wait_id=wait.id, payload=b'"x"', now=time.time())


# -- 3. hook identity ---------------------------------------------------------------------------


@step
async def ask_a() -> Any:
    return await step_hook("approval", on_created=deliver("a"))


@step
async def ask_b() -> Any:
    return await step_hook("approval", on_created=deliver("b"))


@step
async def ask_twice() -> list[Any]:
    first = await step_hook("approval", on_created=deliver("twice-1"))
    second = await step_hook("approval", on_created=deliver("twice-2"))
    return [first, second]


@workflow
async def same_hook_names() -> dict[str, Any]:
    return {"a": await ask_a(), "b": await ask_b(), "twice": await ask_twice()}


async def test_same_hook_name_in_different_steps_and_calls_never_crosses(engine: str) -> None:
    run_id = await start(same_hook_names)
    await resume_hook(await next_token("a"), "payload-a")
    await resume_hook(await next_token("b"), "payload-b")
    await resume_hook(await next_token("twice-1"), "payload-1")
    await resume_hook(await next_token("twice-2"), "payload-2")
    run = await wait_for_run(run_id, 5)
    assert run.result == {"a": "payload-a", "b": "payload-b", "twice": ["payload-1", "payload-2"]}
    keys = sorted(w.wait_key for w in (await pyworkflow.get_store().load_state(run_id)).waits.values())
    assert keys == [
        "ask_a#1/step_hook:approval#1",
        "ask_b#1/step_hook:approval#1",
        "ask_twice#1/step_hook:approval#1",
        "ask_twice#1/step_hook:approval#2",
    ]
    # each hook was announced exactly once, although the workflow replayed several times
    assert [CALLS[f"on_created:{k}"] for k in ("a", "b", "twice-1", "twice-2")] == [1, 1, 1, 1]


# -- 4. durable timeouts ------------------------------------------------------------------------


@step
async def short_review(on_timeout: str) -> Any:
    result = await step_hook("quick", timeout="1s", on_timeout=on_timeout, on_created=deliver("quick"))  # type: ignore[arg-type]
    return "timed out" if result is STEP_HOOK_TIMEOUT else result


@workflow
async def timeout_flow(on_timeout: str) -> Any:
    try:
        return await short_review(on_timeout)
    except HookExpiredError as exc:
        return f"raised {type(exc).__name__}"


async def test_step_hook_timeout_returns_by_itself(engine: str) -> None:
    started = time.monotonic()
    run_id = await start(timeout_flow, "return")
    run = await wait_for_run(run_id, 10)
    elapsed = time.monotonic() - started
    assert run.result == "timed out"
    assert 0.9 <= elapsed < 5, elapsed


async def test_step_hook_timeout_raises_by_default(engine: str) -> None:
    run_id = await start(timeout_flow, "raise")
    run = await wait_for_run(run_id, 10)
    assert run.result == "raised HookExpiredError"
    events = await pyworkflow.get_workflow_events(run_id)
    assert [e.type for e in events].count("step_failed") == 1  # not retried: retrying cannot help


@workflow
async def workflow_level_hook(timeout: str | None) -> Any:
    result = await hook("go", timeout=timeout, on_timeout="return", on_created=deliver("go"))
    return "timed out" if result is STEP_HOOK_TIMEOUT else result


async def test_workflow_level_hook_resumes_and_times_out(engine: str) -> None:
    run_id = await start(workflow_level_hook, None)
    await resume_hook(await next_token("go"), {"ok": 1})
    assert (await wait_for_run(run_id, 5)).result == {"ok": 1}
    run_id = await start(workflow_level_hook, "1s")
    assert (await wait_for_run(run_id, 10)).result == "timed out"


async def test_timeout_that_fell_due_while_nothing_ran_fires_on_restart(engine: str) -> None:
    run_id = await start(timeout_flow, "return")
    await next_token("quick")
    await wait_for_run(run_id, 5, until=("suspended",))
    await pyworkflow.shutdown()  # nothing is running while the deadline passes
    await asyncio.sleep(1.2)
    pyworkflow.configure(storage=engine, poll_interval=0.02)
    assert (await pyworkflow.get_workflow_run(run_id)).status == RunStatus.SUSPENDED
    serving = asyncio.create_task(pyworkflow.serve())
    try:
        run = await wait_for_run(run_id, 5)
        assert run.result == "timed out"
    finally:
        serving.cancel()
        await asyncio.gather(serving, return_exceptions=True)


async def test_resume_racing_the_deadline_has_exactly_one_winner(engine: str) -> None:
    run_id = await start(timeout_flow, "return")
    token = await next_token("quick")
    await wait_for_run(run_id, 5, until=("suspended",))
    store = pyworkflow.get_store()
    (wait,) = [w for w in await store.list_waits() if w.run_id == run_id]
    assert wait.expires_at is not None
    await asyncio.sleep(max(0.0, wait.expires_at - time.time()) + 0.01)
    # The deadline has passed; the sweeper and the resume race. One of them wins.
    outcomes = await asyncio.gather(
        resume_hook(token, "late"), store.expire_due_waits(now=time.time()), return_exceptions=True
    )
    final = await store.get_wait(wait.id)
    assert final is not None and final.status == WaitStatus.EXPIRED
    assert isinstance(outcomes[0], HookExpiredError)
    assert (await wait_for_run(run_id, 5)).result == "timed out"


async def test_resume_before_the_deadline_wins_and_the_deadline_does_nothing(engine: str) -> None:
    run_id = await start(timeout_flow, "return")
    token = await next_token("quick")
    await resume_hook(token, "in time")
    with pytest.raises(HookAlreadyReceivedError):
        await resume_hook(token, "again")
    assert (await wait_for_run(run_id, 5)).result == "in time"
    assert await pyworkflow.get_store().expire_due_waits(now=time.time() + 10) == 0


# -- 7. a decision that arrives before the step suspended ---------------------------------------


@step
async def eager_step() -> Any:
    async def resume_at_once(token: str) -> None:
        count("eager_on_created")
        await resume_hook(token, "early bird")  # the step has not suspended yet

    return await step_hook("eager", on_created=resume_at_once)


@workflow
async def eager_flow() -> Any:
    return await eager_step()


async def test_decision_before_suspension_is_not_lost(engine: str) -> None:
    run_id = await start(eager_flow)
    run = await wait_for_run(run_id, 5)
    assert run.result == "early bird"
    assert CALLS["eager_on_created"] == 1


# -- payload schemas ---------------------------------------------------------------------------


@step
async def typed_answer() -> Any:
    schema = {"type": "object", "properties": {"approved": {"type": "boolean"}}, "required": ["approved"]}
    return await step_hook("typed", payload_schema=schema, on_created=deliver("typed"))


@workflow
async def typed_flow() -> Any:
    return await typed_answer()


async def test_payload_schema_rejects_and_changes_nothing(engine: str) -> None:
    run_id = await start(typed_flow)
    token = await next_token("typed")
    with pytest.raises(pyworkflow.PayloadValidationError, match="approved"):
        await resume_hook(token, {"approved": "maybe"})
    (wait,) = [w for w in await pyworkflow.get_store().list_waits() if w.run_id == run_id]
    assert wait.status == WaitStatus.PENDING and wait.payload is None
    await resume_hook(token, {"approved": False})
    assert (await wait_for_run(run_id, 5)).result == {"approved": False}


@step
async def ask_quietly() -> Any:
    return await step_hook("quiet")  # nobody told: found in the inbox or by listing the waits


@workflow
async def quiet_flow() -> Any:
    return await ask_quietly()


async def test_only_a_wait_whose_on_created_ran_is_marked_notified(engine: str) -> None:
    """The mark keeps a turn run again from calling ``on_created`` again; a wait without one is
    not written a second time for it (on PostgreSQL each such update is a dead row version and
    an entry in each of the wait's indexes until a vacuum)."""
    store = pyworkflow.get_store()
    quiet = await start(quiet_flow)
    told = await start(review_flow, "draft")
    await next_token("review")
    for run_id in (quiet, told):
        await wait_for_run(run_id, 10, until=("suspended",))
    # The suspended turns' ends are written without waiting, by whichever writer takes them: an
    # empty write through one writer (check_writable) can commit while the other still sends
    # them (seen on PostgreSQL, which has two). Until both ends are in (their leases freed):
    for _ in range(200):
        leased = await store.database.write(
            lambda conn: conn.execute(
                "SELECT count(*) FROM queue WHERE run_id IN (?, ?) AND lease_owner IS NOT NULL", (quiet, told)
            ).fetchone()[0]
        )
        if not leased:
            break
        await asyncio.sleep(0.05)
    assert not leased, "the suspended turns' ends were never written"
    waits = {w.run_id: w for w in await store.list_waits()}
    assert waits[told].notified and not waits[quiet].notified
    await store.resolve_wait(wait_id=waits[quiet].id, payload=b'"fine"', now=time.time())
    assert (await wait_for_run(quiet, 10)).result == "fine"
