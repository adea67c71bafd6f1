"""One turn of a run: execute the workflow function from the top against its recorded state and
record how the turn ended (suspended, completed or failed) in one transition."""

from __future__ import annotations

import logging
from collections.abc import Callable
from typing import Any

from . import _clock, _serde, _tracing
from ._context import DatabaseFailed, WorkflowContext, _workflow
from ._crashpoints import crashpoint
from ._errors import (
    CancellationError,
    LeaseLostError,
    NonDeterminismError,
    SerializationError,
    SuspensionSignal,
    WorkflowError,
)
from ._workflow import resolve
from .store import Claim, RunState, Store
from .store import metrics as _metrics

log = logging.getLogger("pyworkflow")


#: Largest serialized workflow input ``start`` accepts (large data belongs in your own storage).
MAX_INPUT_BYTES = 1024 * 1024


def encode_input(
    args: tuple[Any, ...], kwargs: dict[str, Any], module: str | None, trace: dict[str, str] | None = None
) -> bytes:
    """The run's input document, the one encoding of every start: ``module``, the module a
    serving process imports when the workflow is not registered there (None: a run started by
    name, which only a process that registered the workflow runs); ``trace``: the run's trace
    context (see ``_tracing``)."""
    doc: dict[str, Any] = {"args": list(args), "kwargs": kwargs}
    if module is not None:
        doc["module"] = module
    if trace:
        doc["trace"] = trace
    data = _serde.dumps(doc, what="workflow arguments")
    if len(data) > MAX_INPUT_BYTES:
        raise SerializationError(
            f"workflow arguments are {len(data)} bytes serialized; the limit is {MAX_INPUT_BYTES}"
        )
    return data


async def execute_turn(
    store: Store, claim: Claim, state: RunState, *, due: Callable[[], None] | None = None
) -> bool:
    """Run one turn and record how it ended. Returns True when the run suspended (a wake-up that
    arrived during the turn leaves it due again at once), False when it ended (completed, failed,
    cancelled) or the turn lost its lease: then nothing is left for this turn's owner to claim.
    ``due()``: called (on any thread) once the end of a suspended turn committed, if it left the
    run due again (``Store.suspend_run``)."""
    fence = claim.fence
    started = _clock.now()
    if state.waits:
        _metrics.observe_continuation(
            (
                (w.kind.value, w.status.value, w.created_at, w.expires_at, w.resolved_at)
                for w in state.waits.values()
            ),
            started,
        )
    log.info(
        "run %s: running (epoch %d)",
        fence.run_id,
        fence.epoch,
        extra={"run_id": fence.run_id, "attempt": fence.epoch},
    )
    outcome = "lost"
    with _tracing.turn(claim, state) as span:
        try:
            outcome = await _turn(store, claim, state, due)
        finally:
            _metrics.labelled(_metrics.ATTEMPT_SECONDS, "workflow", outcome).observe(_clock.now() - started)
            _tracing.outcome(span, outcome)
    return outcome == "suspended"


async def _turn(store: Store, claim: Claim, state: RunState, due: Callable[[], None] | None) -> str:
    """The turn itself; how it ended: suspended, completed, failed, cancelled, or lost (another
    owner holds the run now)."""
    fence = claim.fence
    run = {"run_id": fence.run_id, "attempt": fence.epoch}
    info = _serde.loads(claim.input)
    try:
        defn = resolve(claim.workflow, info.get("module"))
    except WorkflowError as exc:
        log.warning("run %s failed: %s", fence.run_id, exc)
        await store.fail_run(fence, _serde.encode_error(exc), now=_clock.now())
        log.info("run %s: failed: %s", fence.run_id, exc, extra=run)
        return "failed"
    log.info("run %s: %s %s", fence.run_id, "resuming" if claim.resumed else "starting", defn.name, extra=run)
    ctx = WorkflowContext(fence.run_id, fence, store, state)
    token = _workflow.set(ctx)
    try:
        try:
            try:
                result = await defn.fn(*info["args"], **info["kwargs"])
                data = _serde.dumps(result, what="workflow result")
            finally:
                _check_determinism(ctx)
        except SuspensionSignal:
            await store.suspend_run(
                fence,
                notified=ctx.notified,
                delivered=ctx.delivered,
                now=_clock.now(),
                recorded=ctx.suspension_recorded,
                then=_suspended,
                due=due,
            )
            log.info("run %s: suspended (waiting for a hook, a timer or a retry)", fence.run_id, extra=run)
            return "suspended"
        except DatabaseFailed as failed:
            # Not the workflow's error: the turn ends here, its lease runs out and the run is
            # taken again (the runtime logs the database's error as a crashed turn).
            raise failed.error from failed.error.__cause__
        except (LeaseLostError, CancellationError) as exc:
            if isinstance(exc, CancellationError):
                current = await store.get_run(fence.run_id)
                if current is not None and not current.status.is_terminal:
                    await store.fail_run(fence, _serde.encode_error(exc), now=_clock.now())
                    log.info("run %s: failed: %s", fence.run_id, exc, extra=run)
                    return "failed"
                log.info("run %s: cancelled", fence.run_id, extra=run)
                return "cancelled"
            log.warning("run %s: %s; leaving it to its new owner", fence.run_id, exc, extra=run)
            return "lost"
        except Exception as exc:
            log.warning("run %s (%s) failed: %s: %s", fence.run_id, defn.name, type(exc).__name__, exc)
            await store.fail_run(fence, _serde.encode_error(exc), now=_clock.now())
            log.info("run %s: failed: %s: %s", fence.run_id, type(exc).__name__, exc, extra=run)
            return "failed"
        await store.complete_run(fence, data, now=_clock.now())
        log.info("run %s: completed", fence.run_id, extra=run)
        return "completed"
    except (LeaseLostError, CancellationError) as exc:
        log.info("run %s: turn ended without recording: %s", fence.run_id, exc, extra=run)
    finally:
        _workflow.reset(token)
    return "lost"


def _suspended(error: BaseException | None) -> None:
    """Once the end of a suspended turn is durable (perhaps on the store's writer thread)."""
    if error is None:
        crashpoint("after_suspended")


def _check_determinism(ctx: WorkflowContext) -> None:
    unreached = ctx.unreached_steps()
    if unreached:
        raise NonDeterminismError(
            f"run {ctx.run_id}: the workflow no longer reaches the recorded step(s) {', '.join(unreached)}; "
            "was the workflow changed while this run was in flight? Deploy a compatible version "
            "(keep the same steps in the same order) or start a new run."
        )
