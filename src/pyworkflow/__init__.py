"""pyworkflow: durable workflows and AI agents that pause mid-step for a person or another
system, hold nothing while they wait, survive crashes and deploys, and continue where they left
off.

>>> from pyworkflow import workflow, step, step_hook, start, resume_hook
"""

from ._api import (
    PendingHook,
    ResumeResult,
    WorkflowEvent,
    WorkflowRun,
    cancel_workflow,
    configure,
    get_store,
    get_workflow_events,
    get_workflow_run,
    list_pending_hooks,
    resume_hook,
    resume_hook_by_id,
    serve,
    shutdown,
    start,
    wait_for_run,
)
from ._checkpoints import delete_step_checkpoint, load_step_checkpoint, save_step_checkpoint
from ._errors import (
    CancellationError,
    CheckpointConflictError,
    ConfigurationError,
    FatalError,
    HookAlreadyReceivedError,
    HookCancelledError,
    HookError,
    HookExpiredError,
    HookNotFoundError,
    InvalidTokenError,
    LeaseLostError,
    NonDeterminismError,
    PayloadValidationError,
    RetryableError,
    SerializationError,
    StepAlreadyCompletedError,
    StepTimeoutError,
    SuspensionSignal,
    WorkflowError,
    WorkflowNotFoundError,
)
from ._step import step
from ._sync import cancel_workflow_sync, get_workflow_run_sync, resume_hook_sync
from ._waits import STEP_HOOK_TIMEOUT, check_json_schema, hook, sleep, step_hook, validate_payload
from ._workflow import workflow
from .store import RunStatus, WaitStatus

__version__ = "0.1.0"

__all__ = [
    "STEP_HOOK_TIMEOUT",
    "CancellationError",
    "CheckpointConflictError",
    "ConfigurationError",
    "FatalError",
    "HookAlreadyReceivedError",
    "HookCancelledError",
    "HookError",
    "HookExpiredError",
    "HookNotFoundError",
    "InvalidTokenError",
    "LeaseLostError",
    "NonDeterminismError",
    "PayloadValidationError",
    "PendingHook",
    "ResumeResult",
    "RetryableError",
    "RunStatus",
    "SerializationError",
    "StepAlreadyCompletedError",
    "StepTimeoutError",
    "SuspensionSignal",
    "WaitStatus",
    "WorkflowError",
    "WorkflowEvent",
    "WorkflowNotFoundError",
    "WorkflowRun",
    "__version__",
    "cancel_workflow",
    "cancel_workflow_sync",
    "check_json_schema",
    "configure",
    "delete_step_checkpoint",
    "get_store",
    "get_workflow_events",
    "get_workflow_run",
    "get_workflow_run_sync",
    "hook",
    "list_pending_hooks",
    "load_step_checkpoint",
    "resume_hook",
    "resume_hook_by_id",
    "resume_hook_sync",
    "save_step_checkpoint",
    "serve",
    "shutdown",
    "sleep",
    "start",
    "step",
    "step_hook",
    "validate_payload",
    "wait_for_run",
    "workflow",
]
