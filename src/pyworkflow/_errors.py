"""The one exception tree of pyworkflow.

::

    WorkflowError
    ├── FatalError                  a step failure that must not be retried
    ├── RetryableError              a step failure that should be retried (optionally after a delay)
    ├── StepTimeoutError            a step attempt ran past its ``timeout``
    ├── WorkflowNotFoundError       no run with that id / no workflow with that name
    ├── CancellationError           the run was cancelled
    ├── ConfigurationError          bad configuration or misuse of the API
    ├── SerializationError          a value that is not JSON
    ├── CheckpointConflictError     a checkpoint write with a stale revision
    ├── StepAlreadyCompletedError   a second completion of the same step (duplicate delivery)
    ├── LeaseLostError              the turn's lease was taken over by another worker
    ├── NonDeterminismError         replay did not reach the steps the run recorded (code changed)
    ├── DatabaseUnavailableError    the database took no write within the write timeout (locked,
    │                               unreachable, or its file deleted or replaced); nothing changed
    └── HookError
        ├── HookNotFoundError
        ├── HookExpiredError
        ├── HookAlreadyReceivedError
        ├── HookCancelledError
        ├── InvalidTokenError
        └── PayloadValidationError

    SuspensionSignal (BaseException)  control flow: the run waits; never an error

Every exception pickles with its arguments, so it crosses a process boundary intact.
"""

from __future__ import annotations

from typing import Any


class WorkflowError(Exception):
    """A pyworkflow error."""

    def __init__(self, message: str | None = None, **details: Any) -> None:
        self.message = message or (self.__class__.__doc__ or self.__class__.__name__).strip()
        self.details = details
        super().__init__(self.message)

    def __reduce__(self) -> tuple[Any, ...]:
        return (_rebuild, (self.__class__, self.message, self.details))


def _rebuild(cls: type[WorkflowError], message: str, details: dict[str, Any]) -> WorkflowError:
    return cls(message, **details)


class FatalError(WorkflowError):
    """The step failed and must not be retried."""


class RetryableError(WorkflowError):
    """The step failed and may be retried."""

    def __init__(
        self, message: str | None = None, *, retry_after: float | None = None, **details: Any
    ) -> None:
        super().__init__(message, retry_after=retry_after, **details)
        self.retry_after = retry_after


class StepTimeoutError(WorkflowError):
    """The step attempt ran past its timeout."""


class WorkflowNotFoundError(WorkflowError):
    """No such workflow run or workflow."""


class CancellationError(WorkflowError):
    """The workflow run was cancelled."""


class ConfigurationError(WorkflowError):
    """pyworkflow is misconfigured or an API was used where it cannot work."""


class SerializationError(WorkflowError):
    """The value cannot be stored: it is not JSON-serializable."""


class CheckpointConflictError(WorkflowError):
    """The checkpoint was written by someone else since the revision you expected."""


class StepAlreadyCompletedError(WorkflowError):
    """This step already has a recorded result; a second completion is refused."""


class LeaseLostError(WorkflowError):
    """Another worker took over this run; this turn's writes are refused."""


class DatabaseUnavailableError(WorkflowError):
    """The database cannot take writes now: it stayed locked (or unreachable) past the write
    timeout, or its file was deleted or replaced under this process. The write did not happen;
    a retry may succeed once the database is back."""


class NonDeterminismError(WorkflowError):
    """Replaying the workflow did not reach steps this run recorded: the workflow code changed
    while the run was in flight (or depends on something other than its inputs and step results)."""


class HookError(WorkflowError):
    """A hook could not be resumed."""


class HookNotFoundError(HookError):
    """No hook has this token."""


class HookExpiredError(HookError):
    """The hook's deadline passed before a payload arrived."""


class HookAlreadyReceivedError(HookError):
    """The hook already received a payload."""


class HookCancelledError(HookError):
    """The hook was cancelled with its run."""


class InvalidTokenError(HookError):
    """The hook token is malformed."""


class PayloadValidationError(HookError):
    """The payload does not match the hook's payload schema. ``path`` is where in the payload
    (object keys and array indexes; a missing required property is named as the last element),
    empty for the payload as a whole."""

    def __init__(
        self, message: str | None = None, *, path: tuple[str | int, ...] = (), **details: Any
    ) -> None:
        if path:
            details["path"] = tuple(path)  # kept in the details, so it pickles with the rest
        super().__init__(message, **details)
        self.path: tuple[str | int, ...] = tuple(path)


class SuspensionSignal(BaseException):
    """The run must wait (for a hook, a timer or a retry back-off). Raised by the engine and caught
    only at the step/workflow boundary; a BaseException so that ``except Exception`` in user code,
    tool middleware or retry wrappers cannot swallow it."""

    def __init__(self, reason: str = "wait", wait_key: str | None = None) -> None:
        super().__init__(reason, wait_key)
        self.reason = reason
        self.wait_key = wait_key


# Every class here is exported by ``pyworkflow`` and known by that name: a run's recorded error
# says ``pyworkflow.RetryableError`` (as the stores' own ``pyworkflow.WorkerCrashed`` does), and
# so do tracebacks, not this private module's path. Pickles find them there too.
for _cls in list(globals().values()):
    if isinstance(_cls, type) and issubclass(_cls, BaseException) and _cls.__module__ == __name__:
        _cls.__module__ = "pyworkflow"
del _cls
