"""The atfgraph workload of the graph trials (node ``reliab``; workers import ``app``).

``trial`` saves a checkpoint (compare-and-set), runs an inline child step, pauses on an
approval (decided, or left to expire when it was given ``expires``) and saves again in its
continuation; ``held`` blocks mid-handler for the lease trials.
Every side effect is a ledger line keyed by the traverser's id; every attempt records its epoch,
so two processes holding one lease at once would show as one epoch with two pids.
"""

from __future__ import annotations

import asyncio
from typing import Any

from tests.reliability.ledger import Ledger

from atfgraph import Agent, current_context

app = Agent(node_id="reliab", version="1.0.0", capacity=4)

#: Side effects of a traverser: at most 1 + the crashes that hit it.
EFFECTS = ("setup", "child", "finish")
REQUIRED = ("setup", "child", "finish")


def _record(what: str, **extra: Any) -> None:
    Ledger.from_env().record(current_context().traverser_id, what, **extra)


@app.skill()
async def double(n: int) -> int:
    _record("child")  # an inline child step: recorded in the path, so run again only after a crash
    return 2 * n


@app.skill()
async def trial(n: int = 0, expires: float | None = None) -> dict[str, Any]:
    """``expires``: the approval's deadline in seconds (the graph trials' reviewer leaves such an
    approval to expire, so that the server's sweeper has work)."""
    ctx = current_context()
    _record("attempt", epoch=ctx.epoch, attempt=ctx.attempt)
    progress = await app.load_checkpoint("progress")
    if progress is None:
        _record("setup")
        revision = await app.save_checkpoint("progress", {"stage": 1}, expected_revision=0)
        _record("checkpoint", name="progress", revision=revision)
        progress = {"stage": 1}
    doubled = await app.traverse("reliab.double", n=n)
    decision = await app.request_approval({"n": n}, operation_key="review", expires_in_seconds=expires)
    if progress["stage"] == 1:
        revision = await app.save_checkpoint("progress", {"stage": 2}, expected_revision=1)
        _record("checkpoint", name="progress", revision=revision)
    _record("finish")
    return {"n": n, "doubled": doubled, "decision": decision["status"]}


@app.skill()
async def held(seconds: float = 5.0) -> dict[str, Any]:
    """Blocks mid-handler (a lease trial freezes the worker here), then writes under its lease."""
    ctx = current_context()
    _record("attempt", epoch=ctx.epoch, attempt=ctx.attempt)
    await asyncio.sleep(seconds if ctx.attempt == 1 else 0)
    current = await app.load_checkpoint("progress", default={"n": 0})
    revision = await app.save_checkpoint("progress", {"n": current["n"] + 1})
    _record("checkpoint", name="progress", revision=revision)
    _record("finish")
    return {"attempt": ctx.attempt}


@app.skill()
async def parked(expires: float | None = None) -> dict[str, Any]:
    """The soak's waiting run: pauses once on an approval (decided, or expiring after
    ``expires`` seconds), then finishes."""
    decision = await app.request_approval("soak?", operation_key="soak", expires_in_seconds=expires)
    _record("finish")
    return {"status": decision["status"]}
