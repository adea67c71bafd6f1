"""The spec's ``review_step`` end to end on the embedded SQLite store.

    python -m examples.pyworkflow.review_step [--db PATH]

A draft is prepared once (``expensive_setup``), checkpointed, and the step suspends on a
``step_hook`` until a reviewer answers. The "reviewer" here is this script: it receives the token
through ``on_created``, resumes the hook, and the step finishes with the restored state.
"""

from __future__ import annotations

import argparse
import asyncio
import tempfile
from pathlib import Path

import pyworkflow
from pyworkflow import (
    STEP_HOOK_TIMEOUT,
    delete_step_checkpoint,
    load_step_checkpoint,
    save_step_checkpoint,
    step,
    step_hook,
    workflow,
)

SETUP_CALLS: list[str] = []
REVIEWER_INBOX: asyncio.Queue[str] = asyncio.Queue()


async def expensive_setup(draft: str) -> dict[str, object]:
    SETUP_CALLS.append(draft)
    print(f"  expensive_setup({draft!r}) runs (call #{len(SETUP_CALLS)})")
    return {"draft": draft, "words": len(draft.split())}


async def send_to_reviewer(token: str) -> None:
    print(f"  on_created: token {token[:12]}... sent to the reviewer")
    REVIEWER_INBOX.put_nowait(token)


async def finalize(state: dict[str, object], feedback: dict[str, object]) -> dict[str, object]:
    return {"draft": state["draft"], "approved": feedback.get("approved"), "note": feedback.get("note")}


async def finalize_without_review(state: dict[str, object]) -> dict[str, object]:
    return {"draft": state["draft"], "approved": None, "note": "no review before the deadline"}


@step
async def review_step(draft: str):  # type: ignore[no-untyped-def]
    # 1. On first entry, checkpoint is None. On resume, it holds what we saved.
    checkpoint = await load_step_checkpoint()
    if checkpoint is None:
        state = await expensive_setup(draft)  # runs once, ever
        await save_step_checkpoint({"state": state})  # persisted to storage
    else:
        state = checkpoint["state"]  # restored on resume

    # 2. Suspend the step until resume_hook() delivers a payload.
    #    on_created fires once, with the token to hand to the external system.
    async def notify(token: str):  # type: ignore[no-untyped-def]
        await send_to_reviewer(token)

    feedback = await step_hook(
        "human_review",
        timeout="24h",
        on_created=notify,
        on_timeout="return",  # deadline is durable; see below
    )
    if feedback is STEP_HOOK_TIMEOUT:
        return await finalize_without_review(state)

    # 3. Continue with restored state + the hook payload.
    result = await finalize(state, feedback)
    await delete_step_checkpoint()  # cleanup
    return result


@workflow
async def publish(draft: str) -> dict[str, object]:
    return await review_step(draft)


async def main(db: Path) -> None:
    pyworkflow.configure(storage=str(db))  # a bare path is taken literally
    print(f"store: {db} (SQLite, WAL, synchronous=FULL)")
    run_id = await pyworkflow.start(publish, "Durable review of a draft")
    token = await asyncio.wait_for(REVIEWER_INBOX.get(), 10)
    run = await pyworkflow.wait_for_run(run_id, 10, until=("suspended",))
    print(f"run {run_id}: {run.status} (waiting for the reviewer; no task or thread is held)")
    result = await pyworkflow.resume_hook(token, {"approved": True, "note": "ship it"})
    print(f"resume_hook: payload recorded for hook {result.hook_name!r}; run scheduled")
    run = await pyworkflow.wait_for_run(run_id, 10)
    print(f"run {run_id}: {run.status}")
    print(f"result: {run.result}")
    print(f"expensive_setup ran {len(SETUP_CALLS)} time(s)")
    await pyworkflow.shutdown()


if __name__ == "__main__":
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--db", type=Path, help="SQLite file (default: a fresh temporary file)")
    args = parser.parse_args()
    db = args.db or Path(tempfile.mkdtemp(prefix="pyworkflow-")) / "review.db"
    asyncio.run(main(db))
