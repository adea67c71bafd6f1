"""``@workflow``: a deterministic async function whose steps, hooks and sleeps are durable.

A run replays its workflow function from the top on every turn; completed steps return their
recorded results, so the code between them must be deterministic (no clocks, randomness or I/O
outside steps)."""

from __future__ import annotations

import functools
import importlib
import re
import sys
from collections.abc import Awaitable, Callable, Coroutine
from dataclasses import dataclass
from pathlib import Path
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

#: The longest workflow name.
MAX_WORKFLOW_NAME = 256
#: What a workflow name may not hold: C0 and C1 controls, zero-width and bidirectional-override
#: marks, line and paragraph separators, invisible operators and the BOM (what would garble or
#: disguise it in a log, a terminal or the console).
_HIDDEN = "\\u0000-\\u001f\\u007f-\\u009f\\u200b-\\u200f\\u2028-\\u202e\\u2060-\\u206f\\ufeff"
#: A workflow name: none of those characters, and not blank. Also a JSON Schema pattern (the
#: graph server's OpenAPI document declares it).
WORKFLOW_NAME_PATTERN = f"^[^{_HIDDEN}]*[^\\s{_HIDDEN}][^{_HIDDEN}]*$"
_WORKFLOW_NAME = re.compile(WORKFLOW_NAME_PATTERN)


def check_workflow_name(name: object) -> str:
    """``name`` if it is a workflow name (what ``@workflow(name=...)`` and ``start_by_name``
    accept: 1 to 256 characters, not blank, no control or invisible character), else
    ``ConfigurationError``."""
    if not isinstance(name, str):
        raise ConfigurationError(f"a workflow name must be a string, not {name!r:.80}")
    if not name or len(name) > MAX_WORKFLOW_NAME:
        raise ConfigurationError(f"a workflow name is 1 to {MAX_WORKFLOW_NAME} characters, not {len(name)}")
    if _WORKFLOW_NAME.fullmatch(name) is None:
        raise ConfigurationError(
            f"a workflow name must not be blank nor hold control or invisible characters: {name!r:.80}"
        )
    return name


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
    when the workflow is not registered yet. A workflow in a script (``python review.py``,
    ``python -m pkg.review``) is named after the module that file is when imported
    (``review:publish``), so another process can import it; never ``__main__``."""
    if name is not None:
        check_workflow_name(name)

    def decorate(func: Callable[P, Awaitable[R]]) -> Callable[P, Coroutine[Any, Any, R]]:
        import inspect

        if not inspect.iscoroutinefunction(func):
            raise ConfigurationError(f"@workflow needs an async function, got {func!r}")
        module = importable_module(func.__module__)
        wf_name = name or check_workflow_name(f"{module}:{func.__qualname__}")
        defn = WorkflowDefinition(wf_name, func, module)
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


def importable_module(module: str) -> str:
    """The name another process imports ``module`` by: for ``__main__``, the module the script is
    (``python -m pkg.review`` -> ``pkg.review``; ``python review.py`` -> ``review``, found
    through the script's folder on ``sys.path``), else ``__main__`` (an interactive session)."""
    if module != "__main__":
        return module
    main = sys.modules.get("__main__")
    spec = getattr(main, "__spec__", None)
    if spec is not None and spec.name and spec.name != "__main__":
        return str(spec.name)
    path = getattr(main, "__file__", None)
    if path:
        script = Path(path).resolve()
        on_path = {Path(p or ".").resolve() for p in sys.path}
        if script.suffix == ".py" and script.stem.isidentifier() and script.parent in on_path:
            return script.stem
    return module


def definition_of(fn: Any) -> WorkflowDefinition:
    defn = getattr(fn, "__pyworkflow_workflow__", None)
    if not isinstance(defn, WorkflowDefinition):
        raise ConfigurationError(f"{fn!r} is not a @workflow")
    return defn


def resolve(name: str, module: str | None) -> WorkflowDefinition:
    """The definition registered under ``name``, importing its module first if needed. The
    error says what the serving process lacks and what to do."""
    defn = _registry.get(name)
    if defn is None and module and module != "__main__":
        try:
            importlib.import_module(module)
        except ImportError as exc:
            raise WorkflowNotFoundError(
                f"workflow {name!r} is not registered in this process and its module {module!r} cannot be "
                f"imported here ({exc}); run this process where {module!r} is importable (from the folder "
                "that holds it, or with that folder on PYTHONPATH), or import the module before serving"
            ) from exc
        defn = _registry.get(name)
    if defn is None and module == "__main__":
        raise WorkflowNotFoundError(
            f"workflow {name!r} is not registered in this process: it was defined in an interactive "
            "session or a script run as __main__, which no other process can import. Define it in a "
            "module (a .py file), import that module in the process that serves runs, or name it "
            "with @workflow(name=...) and import its module before serve()"
        )
    if defn is None and not module:
        raise WorkflowNotFoundError(
            f"workflow {name!r} is not registered in this process, and the run names no module to "
            "import (it was started by name): serve this database from a process that imports the "
            "module defining it (import it before serve(), or pyworkflow worker --import MODULE), "
            "check the name for a typo, then retry the run"
        )
    if defn is None:
        raise WorkflowNotFoundError(
            f"workflow {name!r} is not registered in this process although its module {module!r} was "
            "imported; import the module that defines it before serve(), or check that the workflow "
            "was not renamed"
        )
    return defn
