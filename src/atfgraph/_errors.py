"""The errors atfgraph raises.

    AtfgraphError
    ├── HandlerError            raised by a handler: fails the traverser with its code and message
    ├── ServerError             the server answered with an error (``code``, ``status``)
    │   ├── NotFoundError           404: unknown traverser, approval, checkpoint, ...
    │   ├── UnauthenticatedError    401: no valid bearer token
    │   ├── ForbiddenError          403: the token's role may not do this
    │   └── ConflictError           409
    │       ├── ApprovalConflictError   same operation key, different prompt (approval_conflict)
    │       ├── ApprovalDecidedError    a different decision was already recorded (approval_decided)
    │       └── RevisionConflictError   a stale expected_revision (checkpoint or memory)
    ├── SerializationError      a value that is not JSON the server keeps exactly (also a TypeError)
    ├── ServerUnavailableError  the server could not be reached or did not answer in time
    ├── TraverserFailedError    handle.result() on a traverser that failed or was cancelled
    └── TraverserTimeoutError   handle.result(timeout=...) ran out of time

Control flow that user code must not swallow (``_TraversalPaused``, ``_LeaseLost``) derives from
``BaseException`` and lives in ``_context``.
"""

from __future__ import annotations

from typing import Any

from ._models import ErrorInfo


class AtfgraphError(Exception):
    """An atfgraph operation failed."""

    def __init__(self, message: str | None = None) -> None:
        super().__init__(message or self.__doc__ or type(self).__name__)

    @property
    def message(self) -> str:
        return str(self.args[0])


class HandlerError(AtfgraphError):
    """A handler failed for a reason it chose to report (not retried)."""

    def __init__(self, message: str, code: str = "handler_error") -> None:
        super().__init__(message)
        self.code = code

    def __reduce__(self) -> tuple[Any, ...]:
        return (type(self), (self.message, self.code))


class ServerError(AtfgraphError):
    """The graph server answered with an error."""

    def __init__(self, message: str, *, code: str = "server_error", status: int = 0) -> None:
        super().__init__(message)
        self.code = code
        self.status = status

    def __reduce__(self) -> tuple[Any, ...]:
        return (_rebuild_server_error, (type(self), self.message, self.code, self.status))


def _rebuild_server_error(cls: type[ServerError], message: str, code: str, status: int) -> ServerError:
    return cls(message, code=code, status=status)


class NotFoundError(ServerError):
    """The requested object does not exist."""


class UnauthenticatedError(ServerError):
    """The server needs a valid bearer token (``$ATFGRAPH_TOKEN`` or the credentials file)."""


class ForbiddenError(ServerError):
    """The token is valid but its role may not do this."""


class ConflictError(ServerError):
    """The request conflicts with the stored state."""


class ApprovalConflictError(ConflictError):
    """This operation key was used with a different prompt."""


class ApprovalDecidedError(ConflictError):
    """The approval was already decided differently."""


class RevisionConflictError(ConflictError):
    """The stored revision is not the expected one (a competing write)."""


class SerializationError(AtfgraphError, TypeError):
    """The value cannot be sent or stored as JSON exactly: it is not JSON (a set, an object), or
    holds a number JSON would not keep (an integer beyond 64 bits, NaN, ±Infinity). Nothing was
    sent. A ``TypeError`` too, as orjson's own refusals are."""


class ServerUnavailableError(AtfgraphError):
    """The graph server could not be reached or did not answer in time."""


class TraverserFailedError(AtfgraphError):
    """The traverser finished without a result."""

    def __init__(self, traverser_id: str, status: str, error: ErrorInfo | None) -> None:
        super().__init__(f"traverser {traverser_id} {status}: {error}")
        self.traverser_id = traverser_id
        self.status = status
        self.error = error

    def __reduce__(self) -> tuple[Any, ...]:
        return (type(self), (self.traverser_id, self.status, self.error))


class TraverserTimeoutError(AtfgraphError, TimeoutError):
    """The traverser did not finish within the client's timeout."""


_BY_CODE: dict[str, type[ServerError]] = {
    "approval_conflict": ApprovalConflictError,
    "approval_decided": ApprovalDecidedError,
    "revision_conflict": RevisionConflictError,
    "unauthenticated": UnauthenticatedError,
    "forbidden": ForbiddenError,
}


def error_from_response(status: int, body: Any) -> ServerError:
    """The typed exception for an error response of the server (one JSON shape for all)."""
    code, message = "server_error", f"HTTP {status}"
    if isinstance(body, dict) and isinstance(body.get("error"), dict):
        code = str(body["error"].get("code", code))
        message = str(body["error"].get("message", message))
    cls = _BY_CODE.get(code)
    if cls is None:
        cls = NotFoundError if status == 404 else ConflictError if status == 409 else ServerError
    return cls(message, code=code, status=status)
