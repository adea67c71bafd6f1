"""A step's checkpoints live only as long as the step can run again: the store deletes them in
the transaction that records the step's result (a completion, a final failure) and in the one
that ends the run (completed, failed, cancelled, or failed by the crash limit). A retry keeps
them (the next attempt reads them), and a run's own checkpoints (scope ``''``, an atfgraph
traverser's) are never touched. Both backends (``PYWORKFLOW_TEST_STORE=postgresql``)."""

from __future__ import annotations

import os
import secrets
from collections.abc import Iterator

import pytest

from pyworkflow.store import Claim, NewWait, RunStatus, Store, WaitKind, open_store

T0 = 1_700_000_000.0
TTL = 30.0


@pytest.fixture
def store(store_url: str) -> Iterator[Store]:
    s = open_store(store_url)
    try:
        yield s
    finally:
        s.close()


async def _started(store: Store) -> Claim:
    claim = await store.create_run(
        secrets.token_hex(8), "wf", b'{"args":[]}', now=T0, lease_owner="w1", lease_ttl=TTL
    )
    assert claim is not None
    return claim


async def _scopes(store: Store, run_id: str) -> set[tuple[str, str]]:
    return set((await store.load_state(run_id)).checkpoints)


async def _save(store: Store, claim: Claim, *keys: tuple[str, str]) -> None:
    for scope, name in keys:
        await store.save_checkpoint(claim.fence, scope, name, b'{"n":1}', expected_revision=None, now=T0)


def _retry(step_key: str, attempt: int) -> NewWait:
    return NewWait(
        secrets.token_hex(8),
        f"{step_key}/retry:s#{attempt}",
        WaitKind.RETRY,
        "s",
        step_key,
        None,
        T0 + 1,
        None,
    )


async def test_a_completed_step_takes_its_checkpoints_with_it(store: Store) -> None:
    claim = await _started(store)
    other = await _started(store)
    await _save(store, claim, ("a#1", ""), ("a#1", "extra"), ("b#1", ""), ("", "draft"))
    await _save(store, other, ("a#1", ""))
    await store.complete_step(claim.fence, "a#1", b"1", now=T0)
    # Every name in the step's scope went with its result; the other step's, the run's own
    # (scope '') and another run's same step key stayed.
    assert await _scopes(store, claim.fence.run_id) == {("b#1", ""), ("", "draft")}
    assert await _scopes(store, other.fence.run_id) == {("a#1", "")}
    events = [(e.type, e.key) for e in await store.get_events(claim.fence.run_id)]
    assert events[-1] == ("step_completed", "a#1")


async def test_a_retry_keeps_the_checkpoints_and_a_final_failure_deletes_them(store: Store) -> None:
    claim = await _started(store)
    await _save(store, claim, ("s#1", ""), ("t#1", ""))
    await store.fail_step(claim.fence, "s#1", attempt=1, error=b'{"m":1}', retry=_retry("s#1", 1),
                          delivered=0, now=T0)  # fmt: skip
    assert await _scopes(store, claim.fence.run_id) == {("s#1", ""), ("t#1", "")}  # the retry reads it
    await store.fail_step(claim.fence, "s#1", attempt=2, error=b'{"m":2}', retry=None, delivered=0, now=T0)
    assert await _scopes(store, claim.fence.run_id) == {("t#1", "")}


async def test_a_refused_step_result_deletes_nothing(store: Store) -> None:
    claim = await _started(store)
    await store.complete_step(claim.fence, "a#1", b"1", now=T0)
    await _save(store, claim, ("a#1", ""))  # not something the engine does; the refusal must not touch it
    with pytest.raises(Exception, match="already has a result"):
        await store.complete_step(claim.fence, "a#1", b"2", now=T0)
    with pytest.raises(Exception, match="already has a result"):
        await store.fail_step(claim.fence, "a#1", attempt=1, error=b"{}", retry=None, delivered=0, now=T0)
    assert await _scopes(store, claim.fence.run_id) == {("a#1", "")}


_ENDS = ["complete_run", "fail_run", "cancel_run", "crash_limit"] + (
    ["crash_limit_celery"]
    if os.environ.get("PYWORKFLOW_TEST_STORE", "sqlite") in ("postgresql", "postgres")
    else []
)


@pytest.mark.parametrize("end", _ENDS)
async def test_the_end_of_a_run_deletes_its_steps_checkpoints(store: Store, end: str) -> None:
    claim = await _started(store)
    run_id = claim.fence.run_id
    other = await _started(store)
    await _save(store, claim, ("s#1", ""), ("s#1", "named"), ("t#2", ""), ("", "draft"), ("", "notes"))
    await _save(store, other, ("s#1", ""))
    if end == "complete_run":
        await store.complete_run(claim.fence, b"{}", now=T0 + 1)
    elif end == "fail_run":
        await store.fail_run(claim.fence, b'{"type":"E"}', now=T0 + 1)
    elif end == "cancel_run":
        assert await store.cancel_run(run_id, now=T0 + 1) is True
    elif end == "crash_limit":  # the worker died: past max_crashes=0 the claim fails the run
        assert await store.claim("w", limit=5, now=T0 + TTL + 1, lease_ttl=TTL, max_crashes=0) == []
    else:  # a Celery turn's claim reaches the same rule (PostgreSQL)
        found = await store.claim_run(run_id, "w", now=T0 + TTL + 1, lease_ttl=TTL, max_crashes=0)  # type: ignore[attr-defined]
        assert found is None
    run = await store.get_run(run_id)
    assert run is not None and run.status.is_terminal
    # The run's own checkpoints (scope '': a traverser's, read after it ended) stay.
    assert await _scopes(store, run_id) == {("", "draft"), ("", "notes")}
    if end.startswith("crash_limit"):
        assert run.status == RunStatus.FAILED
    else:
        assert await _scopes(store, other.fence.run_id) == {("s#1", "")}  # another run's are its own
