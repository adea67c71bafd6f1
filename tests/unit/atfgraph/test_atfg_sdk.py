"""The agent SDK without a server: declarations, the error tree, the control-flow exceptions."""

from __future__ import annotations

import pickle

import pytest

from atfgraph import (
    Agent,
    ApprovalConflictError,
    ApprovalDecidedError,
    ConflictError,
    HandlerError,
    NotFoundError,
    RevisionConflictError,
    ServerError,
    TraverserStatus,
    current_context,
)
from atfgraph._context import _LeaseLost, _TraversalPaused
from atfgraph._errors import error_from_response
from atfgraph._json import JSONTooDeepError, check_depth


def test_decorators_work_bare_and_with_options() -> None:
    app = Agent("node", version="2.0.0", capacity=3)

    @app.skill
    async def bare(x: int) -> int:
        return x

    @app.skill(name="renamed", timeout_seconds=5)
    async def optioned() -> None:
        return None

    @app.traversal(timeout_seconds=60)
    async def entry() -> None:
        return None

    assert sorted(app.skills) == ["bare", "entry", "renamed"]
    assert app.skills["renamed"].timeout_seconds == 5
    assert app.skills["entry"].is_traversal and not app.skills["bare"].is_traversal
    assert bare.__name__ == "bare"  # the function itself is returned, callable as before


def test_declaration_mistakes_are_refused() -> None:
    app = Agent("node")
    with pytest.raises(TypeError):

        @app.skill
        def not_async() -> None:  # type: ignore[type-var]
            return None

    @app.skill
    async def twice() -> None:
        return None

    with pytest.raises(ValueError):
        app.skill(name="twice")(twice)
    with pytest.raises(ValueError):
        Agent("has.dot")
    with pytest.raises(ValueError):
        Agent("node", capacity=0)


def test_skill_binding_refuses_input_that_does_not_fit() -> None:
    app = Agent("node")

    @app.skill
    async def needs(ticket: str, amount: float = 1.0) -> None:
        return None

    app.skills["needs"].bind({"ticket": "x"})
    with pytest.raises(HandlerError) as exc:
        app.skills["needs"].bind({"amount": 1.0})
    assert exc.value.code == "invalid_input"


def test_control_flow_is_not_an_exception() -> None:
    assert not issubclass(_TraversalPaused, Exception)
    assert not issubclass(_LeaseLost, Exception)
    assert issubclass(_TraversalPaused, BaseException)


def test_current_context_outside_a_handler_fails_loudly() -> None:
    with pytest.raises(RuntimeError, match="not inside an atfgraph handler"):
        current_context()


def test_errors_pickle_with_their_fields() -> None:
    err = pickle.loads(pickle.dumps(HandlerError("no such ticket", code="ticket_not_found")))
    assert (err.message, err.code) == ("no such ticket", "ticket_not_found")
    conflict = pickle.loads(
        pickle.dumps(RevisionConflictError("stale", code="revision_conflict", status=409))
    )
    assert isinstance(conflict, RevisionConflictError) and conflict.status == 409


@pytest.mark.parametrize(
    ("status", "code", "cls"),
    [
        (404, "not_found", NotFoundError),
        (409, "approval_conflict", ApprovalConflictError),
        (409, "approval_decided", ApprovalDecidedError),
        (409, "revision_conflict", RevisionConflictError),
        (409, "lease_lost", ConflictError),
        (422, "validation_error", ServerError),
    ],
)
def test_error_responses_map_to_typed_exceptions(status: int, code: str, cls: type[ServerError]) -> None:
    err = error_from_response(status, {"error": {"code": code, "message": "m"}})
    assert type(err) is cls and err.code == code and err.status == status


def test_error_response_without_the_shape() -> None:
    err = error_from_response(502, b"bad gateway")
    assert type(err) is ServerError and err.status == 502


def test_terminal_statuses() -> None:
    assert {s for s in TraverserStatus if s.is_terminal} == {"succeeded", "failed", "cancelled"}


def test_check_depth() -> None:
    value: object = 1
    for _ in range(64):
        value = [value]
    check_depth(value)
    with pytest.raises(JSONTooDeepError):
        check_depth([value])
    check_depth({"a": [{"b": [1, 2]}] * 1000})
