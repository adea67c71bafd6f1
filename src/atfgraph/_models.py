"""Status enums with their state machines, and the records the client hands back."""

from __future__ import annotations

from dataclasses import dataclass, field
from enum import StrEnum
from typing import Any


class TraverserStatus(StrEnum):
    """The life of one traverser (an execution of a skill).

    queued    -> running (a worker claims it; attempt + 1, epoch + 1) | cancelled
    running   -> waiting (the handler paused on an approval; the lease is closed)
              -> succeeded | failed (the handler returned or raised)
              -> queued (lease expired, handler crashed or timed out with attempts left, or released)
              -> cancelled
    waiting   -> queued (the approval was decided or expired: a continuation, max_attempts + 1)
              -> cancelled
    succeeded, failed, cancelled: terminal.
    """

    QUEUED = "queued"
    RUNNING = "running"
    WAITING = "waiting"
    SUCCEEDED = "succeeded"
    FAILED = "failed"
    CANCELLED = "cancelled"

    @property
    def is_terminal(self) -> bool:
        return self in _TERMINAL


_TERMINAL = frozenset({TraverserStatus.SUCCEEDED, TraverserStatus.FAILED, TraverserStatus.CANCELLED})


class ApprovalStatus(StrEnum):
    """pending -> approved | rejected (a reviewer decided)
            -> expired (expires_at passed, or its traverser was cancelled)

    Exactly one transition leaves ``pending``, made by a conditional update, so a decision racing
    the expiry sweeper has one winner. Repeating the same decision is idempotent."""

    PENDING = "pending"
    APPROVED = "approved"
    REJECTED = "rejected"
    EXPIRED = "expired"


#: The decisions a reviewer may record.
DECISIONS = frozenset({ApprovalStatus.APPROVED.value, ApprovalStatus.REJECTED.value})


@dataclass(frozen=True, slots=True)
class ErrorInfo:
    """Why a traverser failed: a stable ``code`` and a human ``message``."""

    code: str
    message: str

    def __str__(self) -> str:
        return f"{self.code}: {self.message}"


@dataclass(frozen=True, slots=True)
class TraverserInfo:
    """A snapshot of one traverser as the server reported it."""

    id: str
    target: str
    status: str
    attempt: int
    max_attempts: int
    version: str | None
    result: Any = None
    error: ErrorInfo | None = None
    created_at: float = 0.0
    finished_at: float | None = None
    #: The id of the approval a ``waiting`` traverser is paused on.
    waiting_on: str | None = None

    @property
    def is_terminal(self) -> bool:
        return TraverserStatus(self.status).is_terminal

    @classmethod
    def from_json(cls, data: dict[str, Any]) -> TraverserInfo:
        error = data.get("error")
        return cls(
            id=data["id"],
            target=data["target"],
            status=data["status"],
            attempt=data["attempt"],
            max_attempts=data["max_attempts"],
            version=data.get("version"),
            result=data.get("result"),
            error=ErrorInfo(error["code"], error["message"]) if error else None,
            created_at=data.get("created_at", 0.0),
            finished_at=data.get("finished_at"),
            waiting_on=data.get("waiting_on"),
        )


@dataclass(frozen=True, slots=True)
class PathItem:
    """One entry of a traverser's path: the traversal itself, then each child step in order."""

    target: str
    status: str
    attempt: int
    result: Any = None
    error: ErrorInfo | None = None


@dataclass(frozen=True, slots=True)
class TraverserPath:
    traverser_id: str
    items: list[PathItem] = field(default_factory=list)


@dataclass(frozen=True, slots=True)
class Checkpoint:
    """A saved JSON value and its revision (1 on creation, + 1 on every write)."""

    name: str
    value: Any
    revision: int
