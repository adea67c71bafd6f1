"""``@workflow``: a deterministic async function whose steps, hooks and sleeps are durable.

A run replays its workflow function from the top on every turn; completed steps return their
recorded results, so the code between them must be deterministic (no clocks, randomness or I/O
outside steps)."""

from __future__ import annotations

import functools
import importlib
from collections.abc import Awaitable, Callable, Coroutine
from dataclasses import dataclass
from typing import Any, ParamSpec, TypeVar, overload

from ._errors import ConfigurationError, WorkflowNotFoundError

P = ParamSpec("P")
R = TypeVar("R")


@dataclass(frozen=True, slots=True)
class WorkflowDefinition:
    name: str
    fn: Callable[..., Awaitable[Any]]
    module: str


_registry: dict[str, WorkflowDefinition] = {}


def _register(defn: WorkflowDefinition) -> None:
    existing = _registry.get(defn.name)
    if existing is not None and existing.fn.__qualname__ != defn.fn.__qualname__:
        raise ConfigurationError(f"two workflows are named {defn.name!r}")
    _registry[defn.name] = defn


@overload
def workflow(fn: Callable[P, Awaitable[R]], /) -> Callable[P, Coroutine[Any, Any, R]]: ...
@overload
def workflow(
    *, name: str | None = None
) -> Callable[[Callable[P, Awaitable[R]]], Callable[P, Coroutine[Any, Any, R]]]: ...


def workflow(fn: Any = None, /, *, name: str | None = None) -> Any:
    """Declare a durable workflow; use bare (``@workflow``) or with a ``name``.

    The default name is ``module:qualname``; a process that resumes a run imports that module
    when the workflow is not registered yet."""
    if name is not None and not isinstance(name, str):
        raise ConfigurationError(f"a workflow name must be a string, not {name!r}")

    def decorate(func: Callable[P, Awaitable[R]]) -> Callable[P, Coroutine[Any, Any, R]]:
        import inspect

        if not inspect.iscoroutinefunction(func):
            raise ConfigurationError(f"@workflow needs an async function, got {func!r}")
        wf_name = name or f"{func.__module__}:{func.__qualname__}"
        defn = WorkflowDefinition(wf_name, func, func.__module__)
        _register(defn)

        @functools.wraps(func)
        async def wrapper(*args: P.args, **kwargs: P.kwargs) -> R:
            return await func(*args, **kwargs)

        wrapper.__pyworkflow_workflow__ = defn  # type: ignore[attr-defined]
        return wrapper

    if fn is not None:
        if name is not None or not callable(fn):
            raise ConfigurationError("use @workflow or @workflow(name=...)")
        return decorate(fn)
    return decorate


def definition_of(fn: Any) -> WorkflowDefinition:
    defn = getattr(fn, "__pyworkflow_workflow__", None)
    if not isinstance(defn, WorkflowDefinition):
        raise ConfigurationError(f"{fn!r} is not a @workflow")
    return defn


def resolve(name: str, module: str | None) -> WorkflowDefinition:
    """The definition registered under ``name``, importing its module first if needed."""
    defn = _registry.get(name)
    if defn is None and module and module != "__main__":
        try:
            importlib.import_module(module)
        except ImportError as exc:
            raise WorkflowNotFoundError(f"workflow {name!r}: cannot import module {module!r}: {exc}") from exc
        defn = _registry.get(name)
    if defn is None:
        raise WorkflowNotFoundError(
            f"workflow {name!r} is not registered in this process; import the module that defines it"
        )
    return defn
