"""A database that fails under a turn is not the run's failure (local runtime, real SQLite file).

Here another connection holds the file's write lock past the store's write timeout while a step
records its result or saves a checkpoint (a PostgreSQL restart does the same to the Celery
workers of tests/integration/celery). The store call fails with the database's error; the turn
stops there, recording nothing more, the runtime logs it as a crashed turn, the run's lease runs
out and the run is taken again: the step runs again (its first result was never recorded) and
the run completes. Before, the engine took the database's error for the workflow's: the run was
failed whenever the database was back for the failure's own write, and a step's ``except
Exception`` could swallow the error of its own checkpoint.
"""

from __future__ import annotations

import asyncio
import sqlite3
import time
import uuid
from collections.abc import Iterator
from pathlib import Path
from typing import Any

import pytest

from pyworkflow import save_step_checkpoint, step, workflow
from pyworkflow._engine import encode_input
from pyworkflow.runtime._local import LocalRuntime
from pyworkflow.store import RunRecord, RunStatus, SQLiteStore

#: The store's write timeout here: a write waits this long for the lock, then fails.
TIMEOUT = 0.3
#: How long the other connection holds the lock: past the step's own write, and released before
#: the write that followed it (the run's failure, before) had timed out.
HOLD = 0.45

calls: list[str] = []
swallowed: list[str] = []
lock: dict[str, Any] = {}


def hold_the_write_lock() -> None:
    """Take the file's write lock on another connection and let it go ``HOLD`` seconds later."""
    other = sqlite3.connect(lock["path"], isolation_level=None)
    other.execute("BEGIN IMMEDIATE")

    def release() -> None:
        other.execute("ROLLBACK")
        other.close()

    asyncio.get_running_loop().call_later(HOLD, release)


@step
async def double(i: int) -> int:
    calls.append("double")
    if calls.count("double") == 1:
        hold_the_write_lock()  # the step's result cannot be recorded
    return i * 2


@workflow(name="db_failure_result")
async def result_wf(i: int) -> int:
    return await double(i) + 1


@step
async def guarded(i: int) -> int:
    calls.append("guarded")
    if calls.count("guarded") == 1:
        hold_the_write_lock()  # the checkpoint cannot be saved
    try:
        await save_step_checkpoint({"i": i})
    except Exception:  # a step's own error handling must not take the database's failure
        swallowed.append("guarded")
    return i


@workflow(name="db_failure_checkpoint")
async def checkpoint_wf(i: int) -> int:
    return await guarded(i)


@pytest.fixture
def store(tmp_path: Path) -> Iterator[SQLiteStore]:
    calls.clear()
    swallowed.clear()
    path = tmp_path / "turns.db"
    opened = SQLiteStore(str(path), write_timeout=TIMEOUT)
    lock["path"] = str(path)
    try:
        yield opened
    finally:
        opened.close()


async def _run(store: SQLiteStore, name: str, arg: int) -> RunRecord:
    """Start a run of ``name`` on a runtime with a 1 s lease; the run once it ended."""
    runtime = LocalRuntime(store, lease_ttl=1.0, poll_interval=0.05)
    await runtime.start()
    try:
        run_id = uuid.uuid4().hex
        await runtime.submit(run_id, name, encode_input((arg,), {}, None))
        deadline = time.monotonic() + 20
        while time.monotonic() < deadline:
            run = await store.get_run(run_id)
            assert run is not None
            if run.status.is_terminal:
                return run
            await asyncio.sleep(0.05)
        raise AssertionError(f"run {run_id} still {run.status} after 20 s")
    finally:
        await runtime.stop()


async def test_a_step_result_the_database_did_not_take_is_run_again_not_failed(
    store: SQLiteStore, caplog: pytest.LogCaptureFixture
) -> None:
    run = await _run(store, "db_failure_result", 20)
    assert run.status == RunStatus.COMPLETED, run
    assert run.result == b"41"
    assert calls == ["double", "double"]  # the first result was never recorded
    assert any("turn crashed; its lease will expire" in r.getMessage() for r in caplog.records)


async def test_a_checkpoint_the_database_did_not_take_is_not_the_steps_error(store: SQLiteStore) -> None:
    run = await _run(store, "db_failure_checkpoint", 7)
    assert run.status == RunStatus.COMPLETED, run
    assert run.result == b"7"
    assert calls == ["guarded", "guarded"]
    assert swallowed == []  # the step's `except Exception` never saw the database's failure
