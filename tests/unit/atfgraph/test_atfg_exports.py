"""The public API of atfgraph is pinned: adding or removing a name must be deliberate."""

from __future__ import annotations

import atfgraph

EXPECTED = [
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


def test_all_is_pinned_and_sorted() -> None:
    assert atfgraph.__all__ == EXPECTED
    assert sorted(atfgraph.__all__) == atfgraph.__all__


def test_every_public_name_resolves() -> None:
    for name in atfgraph.__all__:
        assert getattr(atfgraph, name) is not None
    public = {n for n in vars(atfgraph) if not n.startswith("_") and n != "annotations"}
    modules = {"cli", "server", "worker"}
    assert public - modules - set(EXPECTED) == set()
