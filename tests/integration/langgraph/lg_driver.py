"""The two processes of the SIGKILL test (run with this folder on PYTHONPATH).

python -m lg_driver start DB_URL          start a conversation, print its run id once it waits for
                                          the visitor, then keep serving until killed
python -m lg_driver resume DB_URL RUN_ID TOKEN ANSWER
                                          answer the hook, serve until the run is finished, print it
"""

from __future__ import annotations

import asyncio
import contextlib
import json
import sys
from collections.abc import Callable, Coroutine
from typing import Any

import lg_agents

import pyworkflow


async def start(db_url: str) -> None:
    pyworkflow.configure(storage=db_url, poll_interval=0.02)
    run_id = await pyworkflow.start(lg_agents.support_chat, "Where is my order?")
    run = await pyworkflow.wait_for_run(run_id, 60, until=("suspended", "completed", "failed"))
    print(json.dumps({"run_id": run_id, "status": str(run.status)}), flush=True)
    await pyworkflow.serve()  # a live worker, waiting with the run parked; the test SIGKILLs it here


async def resume(db_url: str, run_id: str, token: str, answer: str) -> None:
    pyworkflow.configure(storage=db_url, poll_interval=0.02)
    await pyworkflow.resume_hook(token, answer)
    await serve(db_url, run_id)


async def serve(db_url: str, run_id: str) -> None:
    pyworkflow.configure(storage=db_url, poll_interval=0.02)
    server = asyncio.create_task(pyworkflow.serve())
    run = await pyworkflow.wait_for_run(run_id, 60)
    print(json.dumps({"status": str(run.status), "result": run.result, "error": str(run.error)}), flush=True)
    server.cancel()
    with contextlib.suppress(asyncio.CancelledError):
        await server


if __name__ == "__main__":
    command, *arguments = sys.argv[1:]
    commands: dict[str, Callable[..., Coroutine[Any, Any, None]]] = {
        "start": start,
        "resume": resume,
        "serve": serve,
    }
    asyncio.run(commands[command](*arguments))
