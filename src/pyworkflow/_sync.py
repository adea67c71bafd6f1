"""Blocking forms of the calls a synchronous program makes most (a Flask or Django view that
receives a reviewer's answer, a script that checks a run). Each runs its coroutine on a private
event loop; called from inside a running loop it fails loudly and names the async form to await
instead (blocking the loop would stall every run it executes)."""

from __future__ import annotations

import asyncio
from collections.abc import Coroutine
from typing import Any, TypeVar

from ._api import ResumeResult, WorkflowRun, cancel_workflow, get_workflow_run, list_runs, resume_hook
from ._errors import ConfigurationError

T = TypeVar("T")


def _run(coro: Coroutine[Any, Any, T], name: str) -> T:
    try:
        asyncio.get_running_loop()
    except RuntimeError:
        return asyncio.run(coro)
    coro.close()
    raise ConfigurationError(f"{name}_sync() blocks; inside a running event loop use 'await {name}(...)'")


def resume_hook_sync(token: str, payload: Any = None) -> ResumeResult:
    """Blocking :func:`~pyworkflow.resume_hook`."""
    return _run(resume_hook(token, payload), "resume_hook")


def get_workflow_run_sync(run_id: str) -> WorkflowRun:
    """Blocking :func:`~pyworkflow.get_workflow_run`."""
    return _run(get_workflow_run(run_id), "get_workflow_run")


def cancel_workflow_sync(run_id: str) -> bool:
    """Blocking :func:`~pyworkflow.cancel_workflow`."""
    return _run(cancel_workflow(run_id), "cancel_workflow")


def list_runs_sync(
    *, status: Any = None, workflow: Any = None, limit: int = 100, after: str | None = None
) -> list[WorkflowRun]:
    """Blocking :func:`~pyworkflow.list_runs`."""
    return _run(list_runs(status=status, workflow=workflow, limit=limit, after=after), "list_runs")
