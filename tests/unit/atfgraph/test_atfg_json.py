"""The atfgraph side of the one JSON rule: what the SDK sends is kept exactly or refused, naming
where. NaN and ±Infinity are not written as null, integers beyond 64 bits not left to orjson's
bare TypeError."""

from __future__ import annotations

import math
import socket
from typing import Any

import orjson
import pytest

from atfgraph import Client, SerializationError
from atfgraph._errors import HandlerError
from atfgraph._json import dumps
from atfgraph._worker import _jsonable
from pyworkflow import SerializationError as EngineSerializationError
from pyworkflow import _serde

# -- the SDK's encoder ------------------------------------------------------------------------------

EXACT: list[Any] = [2**64 - 1, -(2**63), 1e308, -0.0, 5e-324, {"a": [None, 1.5, "NaN"]}]


@pytest.mark.parametrize("value", EXACT, ids=repr)
def test_values_json_keeps_are_sent_as_they_are(value: Any) -> None:
    decoded = orjson.loads(dumps(value))
    assert decoded == value and type(decoded) is type(value)


INEXACT: list[tuple[str, Any, str]] = [
    ("2**64", {"account": 2**64}, "body.account: the integer 18446744073709551616 does not fit in 64 bits"),
    ("-2**63-1", [-(2**63) - 1], "body[0]: the integer -9223372036854775809 does not fit in 64 bits"),
    ("nan", {"scores": [1.0, math.nan]}, "body.scores[1]: nan is not a JSON number"),
    ("inf", {"limit": math.inf}, "body.limit: inf is not a JSON number"),
    ("-inf-in-tuple", {"range": (0, -math.inf)}, "body.range[1]: -inf is not a JSON number"),
]


@pytest.mark.parametrize(("value", "where"), [c[1:] for c in INEXACT], ids=[c[0] for c in INEXACT])
def test_numbers_json_would_not_keep_are_refused_naming_where(value: Any, where: str) -> None:
    with pytest.raises(SerializationError) as refused:
        dumps(value, what="PUT /memory/s/k: the body", root="body")
    assert str(refused.value).startswith(f"PUT /memory/s/k: the body cannot be stored as JSON: {where}")
    assert isinstance(refused.value, TypeError)  # as orjson's own refusals are


@pytest.mark.parametrize(
    "value", [c[1] for c in INEXACT] + EXACT, ids=[c[0] for c in INEXACT] + [repr(v) for v in EXACT]
)
def test_the_sdk_and_the_engine_apply_the_same_rule(value: Any) -> None:
    engine_refuses = sdk_refuses = False
    try:
        _serde.dumps(value)
    except EngineSerializationError:
        engine_refuses = True
    try:
        dumps(value)
    except SerializationError:
        sdk_refuses = True
    assert engine_refuses == sdk_refuses


def _unreachable() -> str:
    with socket.socket() as s:
        s.bind(("127.0.0.1", 0))
        return f"http://127.0.0.1:{s.getsockname()[1]}"  # nothing listens there once closed


async def test_the_client_refuses_before_sending_anything() -> None:
    """Against a server that is not there: a refusal, not ServerUnavailableError, proves that
    nothing was sent."""
    async with Client(_unreachable(), token="atfg_x") as client:
        with pytest.raises(SerializationError, match=r"^POST /traversers: the body .* body\.input\.n: "):
            await client.submit("desk.refund", {"n": 2**64 + 1})
        with pytest.raises(SerializationError, match=r"body\.response\.ratio: nan is not"):
            await client.decide_approval("ap-1", "approved", {"ratio": math.nan})
        with pytest.raises(SerializationError, match=r"body\.prompt\.limit: inf is not"):
            await client.request_approval("t-1", {"limit": math.inf}, operation_key="k", pause=False)


def test_a_handler_result_that_would_change_fails_the_traverser_saying_where() -> None:
    assert _jsonable({"total": 2**64 - 1}) == {"total": 2**64 - 1}
    with pytest.raises(HandlerError) as failed:
        _jsonable({"total": math.nan})
    assert failed.value.code == "result_not_json"
    assert failed.value.message.startswith("the handler's result cannot be stored as JSON: $.total: nan")
