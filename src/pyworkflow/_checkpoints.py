"""Step checkpoints: JSON state saved inside a step so that re-executing it (after a hook, a
retry or a crash) can skip work already done. One value per step, compare-and-set underneath.
They serve only that re-execution, so the store deletes them in the transaction that records the
step's result (its completion or final failure) and in the one that ends the run."""

from __future__ import annotations

from typing import Any

from . import _serde
from ._context import recorded, require_step
from ._crashpoints import crashpoint
from .store import CheckpointRecord

_NAME = ""  # one checkpoint per step; the store supports named ones for other faces


async def save_step_checkpoint(value: Any) -> int:
    """Persist ``value`` (JSON) for the current step; durable when this returns. Returns the
    checkpoint's revision (1 for the first save)."""
    ctx = require_step("save_step_checkpoint")
    wctx = ctx.workflow
    data = _serde.dumps(value, what=f"checkpoint of step {ctx.step_key}")
    key = (ctx.step_key, _NAME)
    current = wctx.state.checkpoints.get(key)
    revision = await recorded(
        wctx.store.save_checkpoint(
            wctx.fence,
            ctx.step_key,
            _NAME,
            data,
            expected_revision=current.revision if current else 0,
            now=wctx.now(),
        )
    )
    wctx.state.checkpoints[key] = CheckpointRecord(ctx.step_key, _NAME, data, revision)
    crashpoint("after_checkpoint_saved")
    return revision


async def load_step_checkpoint() -> Any:
    """The value last saved by this step in this run, or ``None`` on first entry."""
    ctx = require_step("load_step_checkpoint")
    record = ctx.workflow.state.checkpoints.get((ctx.step_key, _NAME))
    return _serde.loads(record.value) if record else None


async def delete_step_checkpoint() -> bool:
    """Remove this step's checkpoint; returns whether there was one. The deletion is written with
    the turn's next write (usually the step's result, which deletes its checkpoints anyway), not
    in a commit of its own: a crash before that leaves the checkpoint for the step's next
    execution, as a crash just before this call would."""
    ctx = require_step("delete_step_checkpoint")
    wctx = ctx.workflow
    if wctx.state.checkpoints.pop((ctx.step_key, _NAME), None) is None:
        return False
    return await recorded(
        wctx.store.delete_checkpoint(wctx.fence, ctx.step_key, _NAME, now=wctx.now(), defer=True)
    )
