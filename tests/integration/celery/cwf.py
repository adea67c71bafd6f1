"""Workflows for the Celery integration tests. A real module: workers import it (``-I cwf``) and
the test process starts runs of it. Side effects are recorded as lines in files under
``$PWTEST_DIR`` (appends are atomic across processes), so the tests can count executions.

With ``PWTEST_DUPLICATE=1`` every turn message this process publishes is published twice.
"""

from __future__ import annotations

import asyncio
import os
import threading
from pathlib import Path
from typing import Any

from celery.signals import after_task_publish  # type: ignore[import-untyped]

from pyworkflow import (
    STEP_HOOK_TIMEOUT,
    load_step_checkpoint,
    save_step_checkpoint,
    sleep,
    step,
    step_hook,
    workflow,
)

DIR = Path(os.environ.get("PWTEST_DIR", "/tmp/pwtest"))
SLOW = float(os.environ.get("PWTEST_SLOW", "0"))


def record(kind: str, key: object) -> None:
    fd = os.open(DIR / f"{kind}.log", os.O_WRONLY | os.O_APPEND | os.O_CREAT, 0o644)
    try:
        os.write(fd, f"{key}\n".encode())
    finally:
        os.close(fd)


def counts(kind: str) -> dict[str, int]:
    path = DIR / f"{kind}.log"
    found: dict[str, int] = {}
    if path.exists():
        for line in path.read_text().splitlines():
            found[line] = found.get(line, 0) + 1
    return found


def token_of(key: object) -> str:
    return (DIR / "tokens" / str(key)).read_text()


def _save_token(key: object, token: str) -> None:
    folder = DIR / "tokens"
    folder.mkdir(exist_ok=True)
    tmp = folder / f".{key}.{os.getpid()}"
    tmp.write_text(token)
    tmp.replace(folder / str(key))


@step
async def prepare(i: int) -> dict[str, Any]:
    record("prepare", i)
    return {"i": i, "pad": "p" * 200}


@step
async def review(i: int) -> dict[str, Any]:
    state = await load_step_checkpoint()
    if state is None:
        record("setup", i)  # the expensive work a checkpoint protects
        state = {"setup": i, "pad": "c" * 200}
        await save_step_checkpoint(state)
        record("checkpointed", i)  # committed: from here on a re-run must not redo the setup
    if SLOW:
        record("slow", i)
        record(f"slow-{os.getpid()}", i)  # which worker process runs it
        await asyncio.sleep(SLOW)  # a worker may be killed here: after the checkpoint, mid-step
    payload = await step_hook("approve", on_created=lambda token: _save_token(i, token))
    return {"setup": state["setup"], "payload": payload}


@workflow
async def hitl(i: int) -> dict[str, Any]:
    a = await prepare(i)
    b = await review(i)
    return {"i": a["i"], "setup": b["setup"], "payload": b["payload"]}


@step
async def wait_with_deadline(key: str) -> bool:
    answer = await step_hook(
        "deadline", timeout="2s", on_timeout="return", on_created=lambda t: _save_token(key, t)
    )
    return answer is STEP_HOOK_TIMEOUT


@workflow
async def deadline(key: str) -> dict[str, Any]:
    timed_out = await wait_with_deadline(key)
    return {"key": key, "timed_out": timed_out}


@workflow
async def sleeper(key: str) -> str:
    await sleep(2)
    record("woke", key)
    return f"slept {key}"


@workflow
async def two_sleeps(key: str) -> str:
    await sleep(1)
    record("first_sleep", key)
    await sleep(1)
    return f"slept twice {key}"


@step(max_retries=2, retry_delay=0.1, backoff=1.0)
async def fail_twice(key: str) -> str:
    record("attempt", key)
    if counts("attempt")[key] <= 2:
        raise RuntimeError(f"attempt {counts('attempt')[key]} of {key} fails")
    return f"third attempt of {key}"


@workflow
async def retried_twice(key: str) -> str:
    return await fail_twice(key)


@step
async def die_every_time(key: str) -> str:
    record("die", key)
    os.kill(os.getpid(), 9)  # the worker process dies in the middle of this step, every time
    return key


@workflow
async def poison(key: str) -> str:
    return await die_every_time(key)


# -- duplicate deliveries ------------------------------------------------------------------------

_again = threading.local()


@after_task_publish.connect  # type: ignore[untyped-decorator]
def _publish_twice(sender: str | None = None, body: Any = None, **_: Any) -> None:
    if os.environ.get("PWTEST_DUPLICATE") != "1" or sender != "pyworkflow.turn":
        return
    if getattr(_again, "busy", False):
        return
    from pyworkflow.runtime._celery import CeleryOptions, dispatch

    _again.busy = True
    try:
        options = CeleryOptions.from_extra({"queue": os.environ["PWTEST_QUEUE"]})
        run_id = body[0][0]
        dispatch([run_id], options)
        record("duplicated", run_id)
    finally:
        _again.busy = False
