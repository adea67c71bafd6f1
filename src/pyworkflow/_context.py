"""The context a workflow turn and a step attempt run in, carried by context variables."""

from __future__ import annotations

from collections.abc import Awaitable
from contextvars import ContextVar
from dataclasses import dataclass, field
from typing import TypeVar

from . import _clock
from ._errors import ConfigurationError
from .store import Fence, RunState, Store, database_failed

T = TypeVar("T")


class DatabaseFailed(BaseException):
    """Control flow: the database failed under one of the turn's own store calls (see
    :func:`~pyworkflow.store.database_failed`). The turn stops where it is, recording nothing
    more, and the engine hands the database's error (``error``) to the runtime, which lets the
    run's lease run out: the run is taken again. A BaseException so that neither the engine's
    handling of a step's or a workflow's errors nor ``except Exception`` in their code takes it
    for theirs; it never leaves the turn."""

    def __init__(self, error: BaseException) -> None:
        super().__init__(str(error))
        self.error = error


async def recorded(call: Awaitable[T]) -> T:
    """Await one of the turn's own store calls (a step's result, a checkpoint, a wait): a
    database that failed under it raises :class:`DatabaseFailed`; its refusals (a fence, a
    revision) are raised as they are."""
    try:
        return await call
    except Exception as exc:
        if database_failed(exc):
            raise DatabaseFailed(exc) from exc
        raise


@dataclass(slots=True)
class WorkflowContext:
    """One turn of one run: its fence, its replay state and deterministic call counters."""

    run_id: str
    fence: Fence
    store: Store
    state: RunState
    step_counters: dict[str, int] = field(default_factory=dict)
    wait_counters: dict[str, int] = field(default_factory=dict)
    #: waits whose on_created ran in this turn: marked notified with the suspension
    notified: list[str] = field(default_factory=list)
    #: generator steps' delivered-chunk counts, saved with the suspension
    delivered: dict[str, int] = field(default_factory=dict)
    #: step keys this turn reached, to detect a replay that diverged from the recorded run
    visited: set[str] = field(default_factory=set)
    #: a wait created in this turn committed the run's suspension with it (create_wait(suspend=
    #: True)): the suspension then only ends the turn, without waiting for that commit
    suspension_recorded: bool = False

    def next_step_key(self, name: str) -> str:
        n = self.step_counters.get(name, 0) + 1
        self.step_counters[name] = n
        key = f"{name}#{n}"
        self.visited.add(key)
        return key

    def unreached_steps(self) -> list[str]:
        """Recorded, finished steps this turn's replay never called: the code has diverged."""
        return sorted(
            key
            for key, record in self.state.steps.items()
            if key not in self.visited and record.status in ("completed", "failed")
        )

    def next_wait_key(self, scope: str, kind: str, name: str) -> str:
        base = f"{scope}/{kind}:{name}" if scope else f"{kind}:{name}"
        n = self.wait_counters.get(base, 0) + 1
        self.wait_counters[base] = n
        return f"{base}#{n}"

    @staticmethod
    def now() -> float:
        return _clock.now()


@dataclass(slots=True)
class StepContext:
    """One attempt of one step inside a turn."""

    workflow: WorkflowContext
    step_key: str
    name: str
    attempt: int


_workflow: ContextVar[WorkflowContext | None] = ContextVar("pyworkflow_workflow", default=None)
_step: ContextVar[StepContext | None] = ContextVar("pyworkflow_step", default=None)


def current_workflow() -> WorkflowContext | None:
    return _workflow.get()


def current_step() -> StepContext | None:
    return _step.get()


def require_step(api: str) -> StepContext:
    ctx = _step.get()
    if ctx is None:
        raise ConfigurationError(
            f"{api}() must be called inside a @step running in a workflow"
            + ("; use hook() at workflow level" if api == "step_hook" else "")
        )
    return ctx


def require_workflow(api: str) -> WorkflowContext:
    ctx = _workflow.get()
    if ctx is None:
        raise ConfigurationError(f"{api}() must be called inside a running @workflow")
    return ctx
