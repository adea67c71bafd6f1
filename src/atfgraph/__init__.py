"""atfgraph: graph server, workers and agents with durable approvals.

Agents declare skills (``Agent``, ``@app.skill``, ``@app.traversal``); workers
(``python -m atfgraph.worker --module pkg.mod:app``) run them for the graph server
(``atfg server start``); a ``Client`` submits traversers and decides approvals.
"""

from __future__ import annotations

from ._agent import Agent, Skill
from ._client import Client, TraverserHandle
from ._context import TraversalContext, current_context
from ._errors import (
    ApprovalConflictError,
    ApprovalDecidedError,
    AtfgraphError,
    ConflictError,
    ForbiddenError,
    HandlerError,
    NotFoundError,
    RevisionConflictError,
    SerializationError,
    ServerError,
    ServerUnavailableError,
    TraverserFailedError,
    TraverserTimeoutError,
    UnauthenticatedError,
)
from ._models import (
    ApprovalStatus,
    Checkpoint,
    ErrorInfo,
    PathItem,
    TraverserInfo,
    TraverserPath,
    TraverserStatus,
)

__all__ = [
    "Agent",
    "ApprovalConflictError",
    "ApprovalDecidedError",
    "ApprovalStatus",
    "AtfgraphError",
    "Checkpoint",
    "Client",
    "ConflictError",
    "ErrorInfo",
    "ForbiddenError",
    "HandlerError",
    "NotFoundError",
    "PathItem",
    "RevisionConflictError",
    "SerializationError",
    "ServerError",
    "ServerUnavailableError",
    "Skill",
    "TraversalContext",
    "TraverserFailedError",
    "TraverserHandle",
    "TraverserInfo",
    "TraverserPath",
    "TraverserStatus",
    "TraverserTimeoutError",
    "UnauthenticatedError",
    "current_context",
]
