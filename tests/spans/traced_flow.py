"""A workflow that suspends on a step hook, and the three programs of a tracing test, each run
in its own process (see :func:`main`): ``start STORAGE TOKEN_FILE`` (starts a run, waits until it
is suspended, prints its id), ``decide STORAGE TOKEN`` (resumes the hook), ``resume STORAGE
RUN_ID`` (serves the store until the run finished; its spans are dumped from the SDK's in-memory
exporter). With ``TRACED_BROKER`` set they use the Celery runtime on that broker (queue
``TRACED_QUEUE``)."""

from __future__ import annotations

import asyncio
import contextlib
import os
from pathlib import Path
from typing import Any

import pyworkflow
from pyworkflow import step, step_hook, workflow

TOKEN_FILE = os.environ.get("TRACED_TOKEN_FILE", "")


@step
async def prepare(ticket: str) -> str:
    return f"prepared {ticket}"


@step
async def review(draft: str) -> dict[str, Any]:
    return await step_hook("review", timeout="1h", on_created=_write_token)


@step
async def publish(decision: dict[str, Any]) -> str:
    return "published" if decision.get("approved") else "dropped"


@workflow
async def traced(ticket: str) -> str:
    draft = await prepare(ticket)
    decision = await review(draft)
    return await publish(decision)


def _write_token(hook: Any) -> None:
    token = hook if isinstance(hook, str) else hook.token
    Path(TOKEN_FILE).write_text(token)


def _configure(storage: str) -> None:
    broker = os.environ.get("TRACED_BROKER")
    if broker:
        pyworkflow.configure(
            storage=storage, runtime="celery", broker=broker, queue=os.environ["TRACED_QUEUE"]
        )
    else:
        pyworkflow.configure(storage=storage)


async def _start(storage: str) -> None:
    _configure(storage)
    run_id = await pyworkflow.start(traced, "QF-1")
    await pyworkflow.wait_for_run(run_id, 60, until=("suspended",))
    print(run_id, flush=True)
    await pyworkflow.shutdown()


async def _decide(storage: str, token: str) -> None:
    _configure(storage)
    await pyworkflow.resume_hook(token, {"approved": True})
    await pyworkflow.shutdown()


async def _resume(storage: str, run_id: str) -> None:
    import spanfile

    _configure(storage)
    serving = asyncio.create_task(pyworkflow.serve())
    run = await pyworkflow.wait_for_run(run_id, 60)
    serving.cancel()
    with contextlib.suppress(asyncio.CancelledError):
        await serving
    print(run.status.value, run.result, flush=True)
    spanfile.dump()


def main(argv: list[str]) -> None:
    """``python -c 'import traced_flow, sys; traced_flow.main(sys.argv[1:])' COMMAND STORAGE ARG``
    (imported, not run as ``__main__``: the run is stored under this module's name)."""
    global TOKEN_FILE
    command, storage, arg = argv
    if command == "start":
        TOKEN_FILE = arg
        asyncio.run(_start(storage))
    elif command == "decide":
        asyncio.run(_decide(storage, arg))
    else:
        asyncio.run(_resume(storage, arg))
