"""What one run costs in commits when nothing shares them (one run at a time, SQLite): a count,
not a timing. The HITL run of the benchmark (a step, then a step that checkpoints, waits on a
step hook and deletes its checkpoint) takes 4 commits to start and suspend and 3 to resume and
complete; the end of the suspended turn (its lease, the notified mark) rides on the next commit."""

from __future__ import annotations

from collections.abc import AsyncIterator
from pathlib import Path
from typing import Any

import pytest

import pyworkflow
from pyworkflow import (
    _api,
    delete_step_checkpoint,
    load_step_checkpoint,
    save_step_checkpoint,
    step,
    step_hook,
    workflow,
)
from pyworkflow.store import _group_commit

TOKENS: list[str] = []


@step
async def prepare(i: int) -> dict[str, Any]:
    return {"i": i, "title": f"draft #{i}"}


@step
async def review(prepared: dict[str, Any]) -> dict[str, Any]:
    if await load_step_checkpoint() is None:
        await save_step_checkpoint({"stage": "sent-for-review"})
    feedback = await step_hook("review", timeout="24h", on_created=TOKENS.append)
    await delete_step_checkpoint()
    return {**prepared, "feedback": feedback}


@workflow(name="tests.commits.hitl")
async def hitl(i: int) -> dict[str, Any]:
    return await review(await prepare(i))


@step
async def hello() -> str:
    return "hello"


@workflow(name="tests.commits.warm")
async def warm() -> str:
    return await hello()


@pytest.fixture
async def engine(tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> AsyncIterator[Any]:
    # Only a caller's write takes a deferred one: the count cannot depend on the machine's speed.
    monkeypatch.setattr(_group_commit, "DEFER_LINGER", 60.0)
    pyworkflow.configure(storage=f"sqlite:///{tmp_path / 'commits.db'}")
    TOKENS.clear()
    try:
        await pyworkflow.wait_for_run(await pyworkflow.start(warm), 10)  # starts the runtime
        yield pyworkflow.get_store().database
    finally:
        await pyworkflow.shutdown()


def queue_rows(db: Any, run_id: str) -> list[Any]:
    return list(db.reader().execute("SELECT lease_owner FROM queue WHERE run_id = ?", (run_id,)))


async def test_one_run_at_a_time_commits(engine: Any) -> None:
    db = engine
    await db.check_writable()  # the warm-up's writes are all in
    before = db.commits
    run_id = await pyworkflow.start(hitl, 1)
    run = await pyworkflow.wait_for_run(run_id, 10, until=("suspended",))
    assert run.status == "suspended" and len(TOKENS) == 1
    # start+claim, prepare's result, the checkpoint, the hook with the suspension
    assert db.commits - before == 4
    assert queue_rows(db, run_id) != []  # the turn's end is queued, not yet committed
    await db.check_writable()  # the next commit carries it
    assert queue_rows(db, run_id) == []
    (notified,) = db.reader().execute("SELECT notified FROM waits WHERE run_id = ?", (run_id,)).fetchone()
    assert notified == 1

    before = db.commits
    await pyworkflow.resume_hook(TOKENS[0], {"approved": True})
    run = await pyworkflow.wait_for_run(run_id, 10)
    assert run.status == "completed" and run.result["feedback"] == {"approved": True}
    # the decision with the resumed turn's claim, review's result with the checkpoint's deletion,
    # the run's end
    assert db.commits - before == 3
    events = [e.type for e in await pyworkflow.get_workflow_events(run_id)]
    assert events == [
        "run_created", "step_completed", "checkpoint_saved", "wait_created", "run_suspended",
        "wait_received", "run_resumed", "checkpoint_deleted", "step_completed", "run_completed",
    ]  # fmt: skip


async def test_checkpoints_of_the_log_are_rare(engine: Any) -> None:
    """A commit checkpoints the write-ahead log into the file only past 10,000 frames (SQLite's
    default is 1,000): 200 runs one at a time write some 5,000 frames, which at the default would
    have been checkpointed (each time: two fsyncs and every page written, paid by one unlucky
    commit), and leave the database file itself unwritten."""
    db = engine
    await db.check_writable()
    path = Path(db.path)
    before = path.stat()
    for i in range(200):
        run_id = await pyworkflow.start(hitl, 100 + i)
        await pyworkflow.wait_for_run(run_id, 10, until=("suspended",))
        await pyworkflow.resume_hook(TOKENS[-1], {"approved": True})
        assert (await pyworkflow.wait_for_run(run_id, 10)).status == "completed"
    await db.check_writable()
    frames = (Path(f"{path}-wal").stat().st_size - 32) // (4096 + 24)
    assert 2_000 < frames < 10_000, frames
    after = path.stat()
    assert (after.st_mtime_ns, after.st_size) == (before.st_mtime_ns, before.st_size)
    (limit,) = db.reader().execute("PRAGMA wal_autocheckpoint").fetchone()
    assert limit == 10_000


async def test_waiting_for_a_run_in_a_turn_here_reads_it_once(
    engine: Any, monkeypatch: pytest.MonkeyPatch
) -> None:
    """``wait_for_run`` right after ``start`` (or ``resume_hook``) in the process that runs the
    turn reads the run once, when the turn has ended: not first as ``running``. A wait that wants
    ``running`` still reads at once."""
    store = pyworkflow.get_store()
    reads: list[str] = []
    read = store.get_run

    async def counted(run_id: str) -> Any:
        reads.append(run_id)
        return await read(run_id)

    monkeypatch.setattr(store, "get_run", counted)
    run_id = await pyworkflow.start(hitl, 7)
    run = await pyworkflow.wait_for_run(run_id, 10, until=("suspended",))
    assert run.status == "suspended" and reads == [run_id]

    reads.clear()
    await pyworkflow.resume_hook(TOKENS[-1], {"approved": True})
    run = await pyworkflow.wait_for_run(run_id, 10)
    assert run.status == "completed" and reads == [run_id]

    reads.clear()
    other = await pyworkflow.start(hitl, 8)
    assert (await pyworkflow.wait_for_run(other, 10, until=("running", "suspended"))).status in (
        "running",
        "suspended",
    )
    assert reads == [other]
    await pyworkflow.wait_for_run(other, 10, until=("suspended",))
    await pyworkflow.get_store().database.check_writable()  # the turn's end is in
    reads.clear()
    # A run in no turn here (suspended, its turn over): read at once, as before.
    assert not (await _api.get_runtime()).in_turn(other)
    assert (await pyworkflow.wait_for_run(other, 10, until=("suspended",))).status == "suspended"
    assert reads == [other]
