"""The public API of ``pyworkflow``, pinned: a name that appears or disappears fails here first.

Also the exception tree: ``WorkflowError`` is the root of every error, ``SuspensionSignal`` is a
``BaseException`` (so ``except Exception`` in user code cannot swallow it), and every exception
pickles with its message and details (so it crosses a process boundary intact).
"""

from __future__ import annotations

import inspect
import pickle
import subprocess
import sys
import types

import pytest

import pyworkflow
import pyworkflow.store

PUBLIC_API = [
    "CancellationError",
    "CheckpointConflictError",
    "ConfigurationError",
    "DatabaseUnavailableError",
    "FatalError",
    "HookAlreadyReceivedError",
    "HookCancelledError",
    "HookError",
    "HookExpiredError",
    "HookNotFoundError",
    "InvalidTokenError",
    "LeaseLostError",
    "MAX_INPUT_BYTES",
    "MAX_WORKFLOW_NAME",
    "NonDeterminismError",
    "PayloadValidationError",
    "PendingHook",
    "ResumeResult",
    "RetryableError",
    "RunStatus",
    "STEP_HOOK_TIMEOUT",
    "SerializationError",
    "StepAlreadyCompletedError",
    "StepTimeoutError",
    "SuspensionSignal",
    "WORKFLOW_NAME_PATTERN",
    "WaitStatus",
    "WorkflowError",
    "WorkflowEvent",
    "WorkflowNotFoundError",
    "WorkflowRun",
    "__version__",
    "cancel_workflow",
    "cancel_workflow_sync",
    "check_json_schema",
    "check_workflow_name",
    "configure",
    "delete_step_checkpoint",
    "get_store",
    "get_workflow_events",
    "get_workflow_run",
    "get_workflow_run_sync",
    "hook",
    "list_pending_hooks",
    "list_runs",
    "list_runs_sync",
    "load_step_checkpoint",
    "resume_hook",
    "resume_hook_by_id",
    "resume_hook_sync",
    "retry_workflow",
    "save_step_checkpoint",
    "serve",
    "shutdown",
    "sleep",
    "start",
    "start_by_name",
    "start_metrics_server",
    "step",
    "step_hook",
    "validate_payload",
    "wait_for_run",
    "workflow",
]

#: ``pyworkflow.store``: the store protocol and the storage kit atfgraph builds on.
STORE_API = [
    "CheckpointRecord",
    "Claim",
    "DEAD_QUEUE_ROWS",
    "Event",
    "Fence",
    "GroupCommitWriter",
    "Migration",
    "NewWait",
    "PostgresDatabase",
    "PostgresStore",
    "PurgeReport",
    "Purger",
    "QueueVacuum",
    "RunRecord",
    "RunState",
    "RunStatus",
    "SQLiteDatabase",
    "SQLiteStore",
    "StepRecord",
    "StepStatus",
    "StorageURL",
    "Store",
    "WRITE_TIMEOUT",
    "WaitKind",
    "WaitRecord",
    "WaitStatus",
    "YOUNG_GC_THRESHOLD",
    "apply_migrations",
    "apply_postgres_migrations",
    "check_gc_threshold",
    "check_revision",
    "count_purgeable",
    "crashpoint",
    "database_failed",
    "gc_threshold_from_text",
    "hold_gc_pace",
    "load_migrations",
    "log_format",
    "log_level",
    "metrics",
    "open_store",
    "over_a_database_limit",
    "parse_age",
    "parse_storage_url",
    "purge_runs",
    "pyworkflow_migrations",
    "redact",
    "redact_url",
    "refuse_newer_schema",
    "setup_logging",
    "sqlite_path",
    "sqlite_url",
    "tracing",
    "wake_run",
    "write_checkpoint",
]

#: What issue 2 requires of the API, whatever else is added.
REQUIRED = {
    "workflow", "step", "start", "get_workflow_run", "get_workflow_events", "cancel_workflow",
    "configure", "hook", "step_hook", "STEP_HOOK_TIMEOUT", "resume_hook", "save_step_checkpoint",
    "load_step_checkpoint", "delete_step_checkpoint", "sleep", "WorkflowError", "FatalError",
    "RetryableError", "HookNotFoundError", "HookExpiredError", "HookAlreadyReceivedError",
    "InvalidTokenError", "WorkflowNotFoundError", "CancellationError", "SuspensionSignal",
}  # fmt: skip

#: The exception tree: each class and its direct base.
TREE: dict[str, str] = {
    "WorkflowError": "Exception",
    "FatalError": "WorkflowError",
    "RetryableError": "WorkflowError",
    "StepTimeoutError": "WorkflowError",
    "WorkflowNotFoundError": "WorkflowError",
    "CancellationError": "WorkflowError",
    "ConfigurationError": "WorkflowError",
    "SerializationError": "WorkflowError",
    "CheckpointConflictError": "WorkflowError",
    "StepAlreadyCompletedError": "WorkflowError",
    "LeaseLostError": "WorkflowError",
    "NonDeterminismError": "WorkflowError",
    "DatabaseUnavailableError": "WorkflowError",
    "HookError": "WorkflowError",
    "HookNotFoundError": "HookError",
    "HookExpiredError": "HookError",
    "HookAlreadyReceivedError": "HookError",
    "HookCancelledError": "HookError",
    "InvalidTokenError": "HookError",
    "PayloadValidationError": "HookError",
    "SuspensionSignal": "BaseException",
}


def _exceptions() -> list[type[BaseException]]:
    found = []
    for name in pyworkflow.__all__:
        value = getattr(pyworkflow, name)
        if isinstance(value, type) and issubclass(value, BaseException):
            found.append(value)
    return found


def test_all_is_pinned() -> None:
    assert sorted(PUBLIC_API) == PUBLIC_API, "keep the pinned list sorted (plain sorted() order)"
    assert sorted(pyworkflow.__all__) == PUBLIC_API
    assert len(set(pyworkflow.__all__)) == len(pyworkflow.__all__), "a name is listed twice"


def test_issue_requirements_are_exported() -> None:
    assert set(pyworkflow.__all__) >= REQUIRED, REQUIRED - set(pyworkflow.__all__)


def test_every_exported_name_exists_and_star_import_matches() -> None:
    for name in pyworkflow.__all__:
        assert hasattr(pyworkflow, name), name
    namespace: dict[str, object] = {}
    exec("from pyworkflow import *", namespace)
    assert set(namespace) - {"__builtins__"} == set(pyworkflow.__all__)


def test_no_public_name_outside_all() -> None:
    """A public (non-underscore, non-module) attribute must be in ``__all__``: nothing appears
    in the API by accident."""
    public = {
        name
        for name, value in vars(pyworkflow).items()
        if not name.startswith("_") and not isinstance(value, types.ModuleType)
    }
    assert public == set(pyworkflow.__all__) - {"__version__"}


def test_store_all_is_pinned_and_sorted() -> None:
    assert sorted(STORE_API) == STORE_API, "keep the pinned list sorted (plain sorted() order)"
    assert sorted(pyworkflow.store.__all__) == STORE_API  # __all__ itself in ruff's order (RUF022)
    for name in STORE_API:  # PostgresDatabase and PostgresStore are imported on first use
        value = getattr(pyworkflow.store, name)
        if inspect.isfunction(value) or inspect.isclass(value):
            assert inspect.getdoc(value), f"pyworkflow.store.{name} has no docstring"
    with pytest.raises(AttributeError):
        _ = pyworkflow.store.NoSuchName  # type: ignore[attr-defined]


def test_the_store_kit_does_not_import_psycopg_until_asked() -> None:
    code = (
        "import sys, pyworkflow.store, atfgraph.server._identity\n"
        "assert 'psycopg' not in sys.modules, 'psycopg imported'\n"
        "pyworkflow.store.PostgresDatabase\n"
        "assert 'psycopg' in sys.modules\n"
    )
    subprocess.run([sys.executable, "-c", code], check=True, timeout=60)


def test_version_is_a_string() -> None:
    assert isinstance(pyworkflow.__version__, str) and pyworkflow.__version__


def test_public_callables_are_documented() -> None:
    for name in pyworkflow.__all__:
        value = getattr(pyworkflow, name)
        if inspect.isfunction(value) or inspect.isclass(value):
            assert inspect.getdoc(value), f"{name} has no docstring"


def test_suspension_signal_is_not_an_exception() -> None:
    assert issubclass(pyworkflow.SuspensionSignal, BaseException)
    assert not issubclass(pyworkflow.SuspensionSignal, Exception)
    assert not issubclass(pyworkflow.SuspensionSignal, pyworkflow.WorkflowError)
    caught_by_except_exception = False
    with pytest.raises(pyworkflow.SuspensionSignal):
        try:
            raise pyworkflow.SuspensionSignal("hook", "review_step#1/step_hook:x#1")
        except Exception:
            caught_by_except_exception = True
    assert not caught_by_except_exception


def test_exception_tree() -> None:
    exported = {cls.__name__: cls for cls in _exceptions()}
    assert set(exported) == set(TREE), set(exported) ^ set(TREE)
    for name, base in TREE.items():
        assert [b.__name__ for b in exported[name].__bases__] == [base], name
    for cls in _exceptions():
        if cls is not pyworkflow.SuspensionSignal:
            assert issubclass(cls, pyworkflow.WorkflowError), cls
            assert issubclass(cls, Exception), cls


@pytest.mark.parametrize(
    "cls",
    [c for c in _exceptions() if c is not pyworkflow.SuspensionSignal],
    ids=lambda c: c.__name__,
)
def test_errors_pickle_with_message_and_details(cls: type[pyworkflow.WorkflowError]) -> None:
    exc = cls("the message, with ünïcode", run_id="r-1", attempt=3, nested={"a": [1, 2]})
    for protocol in range(pickle.HIGHEST_PROTOCOL + 1):
        back = pickle.loads(pickle.dumps(exc, protocol=protocol))
        assert type(back) is cls
        assert back.message == "the message, with ünïcode"
        assert str(back) == str(exc) == "the message, with ünïcode"
        assert back.details == exc.details
        assert back.details["run_id"] == "r-1" and back.details["nested"] == {"a": [1, 2]}
        assert back.args == exc.args


@pytest.mark.parametrize(
    "cls",
    [c for c in _exceptions() if c is not pyworkflow.SuspensionSignal],
    ids=lambda c: c.__name__,
)
def test_errors_have_a_default_message(cls: type[pyworkflow.WorkflowError]) -> None:
    exc = cls()
    assert exc.message and str(exc) == exc.message
    back = pickle.loads(pickle.dumps(exc))
    assert type(back) is cls and back.message == exc.message and back.details == exc.details


def test_retryable_error_keeps_retry_after_through_pickle() -> None:
    exc = pyworkflow.RetryableError("rate limited", retry_after=2.5, endpoint="x")
    back = pickle.loads(pickle.dumps(exc))
    assert type(back) is pyworkflow.RetryableError
    assert back.retry_after == 2.5
    assert back.details == {"retry_after": 2.5, "endpoint": "x"}
    assert back.message == "rate limited"


def test_suspension_signal_pickles() -> None:
    signal = pyworkflow.SuspensionSignal("hook", "review_step#1/step_hook:human_review#1")
    back = pickle.loads(pickle.dumps(signal))
    assert type(back) is pyworkflow.SuspensionSignal
    assert (back.reason, back.wait_key) == ("hook", "review_step#1/step_hook:human_review#1")


def test_step_hook_timeout_is_a_falsy_singleton_that_pickles() -> None:
    marker = pyworkflow.STEP_HOOK_TIMEOUT
    assert not marker
    assert repr(marker) == "STEP_HOOK_TIMEOUT"
    assert pickle.loads(pickle.dumps(marker)) is marker
    assert type(marker)() is marker
