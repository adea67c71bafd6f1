"""Skills the acceptance tests run in real worker processes (node ``tester``; the version comes
from ATFG_TEST_VERSION so a test can run two versions side by side)."""

from __future__ import annotations

import asyncio
import os
from typing import Any

from atfgraph import Agent, ApprovalConflictError, HandlerError, RevisionConflictError, current_context

app = Agent(node_id="tester", version=os.environ.get("ATFG_TEST_VERSION", "1.0.0"), capacity=2)


@app.skill()
async def pausing(
    prompt: Any = "Proceed?", key: str = "k", expires_in_seconds: float | None = None, checkpoint: Any = None
) -> dict[str, Any]:
    """Pause once; return what the continuation saw."""
    ctx = current_context()
    decision = await app.request_approval(
        prompt, operation_key=key, checkpoint=checkpoint, expires_in_seconds=expires_in_seconds
    )
    return {
        "attempt": ctx.attempt,
        "max_attempts": ctx.max_attempts,
        "decision": decision,
        "version": app.version,
    }


@app.skill()
async def assigned(
    assign_to: dict[str, list[str]] | None = None,
    escalate: dict[str, Any] | None = None,
    expires_in_seconds: float | None = None,
) -> dict[str, Any]:
    """Pause on an approval assigned to some reviewers (and escalated when it falls due)."""
    decision = await app.request_approval(
        "Assigned?", operation_key="assigned", assign_to=assign_to, escalate=escalate,
        expires_in_seconds=expires_in_seconds,
    )  # fmt: skip
    return {"decision": decision}


@app.skill()
async def swallowing() -> dict[str, Any]:
    """User code that catches Exception around a pause must not swallow it."""
    try:
        decision = await app.request_approval("swallow?", operation_key="s")
    except Exception:
        return {"swallowed": True}
    return {"swallowed": False, "status": decision["status"], "attempt": current_context().attempt}


@app.traversal(timeout_seconds=1)
async def quick_review() -> dict[str, Any]:
    """Its one-second timeout covers each active attempt, not the review between them."""
    decision = await app.request_approval("quick?", operation_key="q")
    return {"status": decision["status"], "attempt": current_context().attempt}


@app.traversal(timeout_seconds=0.3)
async def too_slow() -> None:
    await asyncio.sleep(5)


@app.skill()
async def drifting_prompt() -> dict[str, Any]:
    """Builds a different prompt on continuation: the stored decision must not be returned."""
    attempt = current_context().attempt
    try:
        await app.request_approval({"asked_on": attempt}, operation_key="drift")
    except ApprovalConflictError as exc:
        return {"conflict": exc.code, "attempt": attempt}
    return {"conflict": None, "attempt": attempt}


@app.skill()
async def linked(prompt: Any, outbox: str) -> dict[str, Any]:
    """Pause on an approval that carries a decision link, handing its URL to ``outbox`` (a file:
    the test's stand-in for an e-mail); return the decision."""

    def send(minted: dict[str, Any]) -> None:
        with open(outbox, "a") as f:
            f.write(minted["url"] + "\n")

    decision = await app.request_approval(
        prompt, operation_key="linked", decision_link={"label": "duty manager"}, on_decision_link=send
    )
    return {"decision": decision}


@app.skill()
async def revising(question: str, revisions: int = 3) -> dict[str, Any]:
    """Save the checkpoint ``plan`` ``revisions`` times (each revision changes, adds and removes a
    field), then pause on an approval asking ``question``; return the decision."""
    stored = await app.load_checkpoint("plan")
    if stored is None:
        for n in range(1, revisions + 1):
            value: dict[str, Any] = {"step": n, "lines": list(range(n % 3)), f"note_{n}": f"revision {n}"}
            await app.save_checkpoint("plan", value, expected_revision=n - 1)
    decision = await app.request_approval(question, operation_key="plan")
    return {"decision": decision}


@app.skill()
async def not_pausing() -> dict[str, Any]:
    approval = await app.request_approval("fyi", operation_key="fyi", pause=False, expires_in_seconds=60)
    return {
        "approval_status": approval["status"],
        "approval_id": approval["id"],
        "attempt": current_context().attempt,
    }


@app.skill()
async def revisions() -> dict[str, Any]:
    out: dict[str, Any] = {"first": await app.save_checkpoint("c", {"n": 1}, expected_revision=0)}
    try:
        await app.save_checkpoint("c", {"n": "again"}, expected_revision=0)
    except RevisionConflictError as exc:
        out["create_twice"] = exc.code
    out["second"] = await app.save_checkpoint("c", {"n": 2}, expected_revision=1)
    try:
        await app.save_checkpoint("c", {"n": "stale"}, expected_revision=1)
    except RevisionConflictError as exc:
        out["stale"] = exc.code
    out["unchecked"] = await app.save_checkpoint("c", {"n": 3})
    out["loaded"] = await app.load_checkpoint("c")
    out["missing"] = await app.load_checkpoint("nope", default="dflt")
    out["memory_first"] = await app.save_memory("shared", "m", {"v": 1}, expected_revision=0)
    try:
        await app.save_memory("shared", "m", {"v": 0}, expected_revision=0)
    except RevisionConflictError as exc:
        out["memory_conflict"] = exc.code
    out["memory_loaded"] = await app.load_memory("shared", "m")
    return out


@app.skill()
async def resumable() -> dict[str, Any]:
    """Saves progress, pauses, then reports what it found on continuation."""
    first = await app.load_checkpoint("progress")
    if first is None:
        await app.save_checkpoint("progress", {"prepared_on": current_context().attempt}, expected_revision=0)
    decision = await app.request_approval("resume?", operation_key="r")
    return {"progress": await app.load_checkpoint("progress"), "status": decision["status"]}


@app.skill()
async def sleeper(seconds: float = 60.0) -> dict[str, Any]:
    """Attempt 1 blocks (the test kills the worker); later attempts return at once."""
    attempt = current_context().attempt
    if attempt == 1:
        await app.save_checkpoint("started", {"attempt": attempt})
        await asyncio.sleep(seconds)
    return {"attempt": attempt}


@app.skill()
async def refuse(code: str = "nope", message: str = "refused on purpose") -> None:
    raise HandlerError(message, code=code)


@app.skill()
async def crash() -> None:
    raise RuntimeError(f"crash on attempt {current_context().attempt}")


@app.skill()
async def lookup(ticket: str) -> dict[str, Any]:
    return {"ticket": ticket.upper()}


@app.skill()
async def with_steps() -> dict[str, Any]:
    """Two inline child steps, then a pause: on continuation both come from the path."""
    a = await app.traverse("tester.lookup", ticket="ab")
    b = await app.traverse("tester.lookup", ticket="cd")
    decision = await app.request_approval("steps?", operation_key="st")
    return {"a": a, "b": b, "status": decision["status"], "attempt": current_context().attempt}


@app.skill()
async def slow_finish(seconds: float = 1.0) -> str:
    await asyncio.sleep(seconds)
    return "finished"


@app.skill()
async def remote_child(x: int) -> dict[str, Any]:
    """Calls another node's skill (a child traverser on that node's workers), then pauses."""
    doubled = await app.traverse("helper.double", x=x)
    decision = await app.request_approval("remote?", operation_key="remote")
    return {"doubled": doubled, "status": decision["status"], "attempt": current_context().attempt}


helper_app = Agent(node_id="helper", version="1.0.0", capacity=1)


@helper_app.skill()
async def double(x: int) -> int:
    if x < 0:
        raise HandlerError("negative", code="negative")
    return 2 * x


@app.skill()
async def decided_while_running(wait_seconds: float = 1.5) -> dict[str, Any]:
    """Asks without pausing, keeps working (the reviewer decides meanwhile), then asks to pause:
    the decision already recorded is returned and the handler never stops."""
    await app.request_approval("early?", operation_key="early", pause=False)
    await asyncio.sleep(wait_seconds)
    decision = await app.request_approval("early?", operation_key="early")
    return {"status": decision["status"], "attempt": current_context().attempt}


@app.skill()
async def checkpoint_across_restart(gate: str) -> dict[str, Any]:
    """Saves a checkpoint, waits for the test to open ``gate`` (a file; the test stops the server
    first), then saves again: that call is made while the server is down."""
    first = await app.save_checkpoint("c", {"step": 1}, expected_revision=0)
    while not os.path.exists(gate):
        await asyncio.sleep(0.02)
    second = await app.save_checkpoint("c", {"step": 2}, expected_revision=first)
    await app.save_memory("restart", current_context().traverser_id, {"saved": second})
    return {"first": first, "second": second, "attempt": current_context().attempt}


@app.skill()
async def fails_until_retried() -> dict[str, Any]:
    """Fails its first run after saving a checkpoint; a retry (a new attempt) starts from it."""
    seen = await app.load_checkpoint("seen")
    if seen is None:
        await app.save_checkpoint("seen", {"failed_on": current_context().attempt})
        raise HandlerError("the first run fails on purpose", code="first_run")
    return {"seen": seen, "attempt": current_context().attempt}


@app.skill()
async def typed_review(ticket: str) -> dict[str, Any]:
    """Pauses on an approval whose approving response must carry a number ``amount_aud``."""
    decision = await app.request_approval(
        f"Refund on {ticket}?",
        operation_key=f"refund:{ticket}",
        response_schema={
            "type": "object",
            "required": ["amount_aud"],
            "properties": {"amount_aud": {"type": "number"}},
        },
    )
    return {"status": decision["status"], "response": decision["response"]}
