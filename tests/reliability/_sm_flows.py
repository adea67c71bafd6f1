"""The workflow the stateful property test drives (test_state_machine.py), in a module of its
own so that a worker subprocess (``_sm_worker.py``) imports the same definitions.

``machine_flow(key, folder)``: a step that saves two checkpoints, a hook with a timeout (its
token written to ``folder/tokens-<key>``), a durable sleep, and a step that returns what the
hook brought. Each step execution appends a line to ``folder/ledger`` (fsync'd): the side
effects a crash may repeat, and the checkpoint revisions each execution got."""

from __future__ import annotations

import os
from pathlib import Path
from typing import Any

from pyworkflow import (
    STEP_HOOK_TIMEOUT,
    hook,
    load_step_checkpoint,
    save_step_checkpoint,
    sleep,
    step,
    workflow,
)

#: The hook's timeout and the sleep, in (engine clock) seconds: only clock jumps reach them.
HOOK_SECONDS = 3600.0
SLEEP_SECONDS = 600.0


def append(path: Path, line: str) -> None:
    with open(path, "a") as f:
        f.write(line + "\n")
        f.flush()
        os.fsync(f.fileno())


@step
async def prepare(folder: str, key: str) -> int:
    saved = await load_step_checkpoint()
    n = 0 if saved is None else int(saved["n"])
    first = await save_step_checkpoint({"n": n + 1})
    second = await save_step_checkpoint({"n": n + 2})
    append(Path(folder) / "ledger", f"prepare {key} {first} {second}")
    return n


@step
async def finish(folder: str, key: str, outcome: Any) -> Any:
    append(Path(folder) / "ledger", f"finish {key}")
    return outcome


@workflow(name="reliability.machine_flow")
async def machine_flow(key: str, folder: str) -> Any:
    await prepare(folder, key)

    async def keep(token: str) -> None:
        append(Path(folder) / f"tokens-{key}", token)

    payload = await hook("decision", timeout=HOOK_SECONDS, on_created=keep, on_timeout="return")
    await sleep(SLEEP_SECONDS)
    return await finish(folder, key, "timeout" if payload is STEP_HOOK_TIMEOUT else payload)
