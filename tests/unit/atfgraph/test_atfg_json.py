"""The atfgraph side of the one JSON rule: what the SDK sends and what the server reads is kept
exactly or refused, naming where. Integers beyond 64 bits are not rounded to floats, NaN and
±Infinity are not written as null, a literal too large for a double is a 422 (not a 400)."""

from __future__ import annotations

import math
import socket
from typing import Any

import orjson
import pytest
from starlette.requests import Request

from atfgraph import Client, SerializationError
from atfgraph._errors import HandlerError
from atfgraph._json import InexactNumberError, JSONTooDeepError, dumps, loads_exact
from atfgraph._worker import _jsonable
from atfgraph.cli._base import CliError, json_argument
from atfgraph.server._body import read_json
from atfgraph.server._errors import ApiError
from atfgraph.server.console._answers import parse_json_text as parse_json_field
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


# -- the server's reader ----------------------------------------------------------------------------

READ: list[tuple[str, bytes, str]] = [
    ("2**64+1", b'{"payload": {"account": 18446744073709551617}}', "body.payload.account: the integer"),
    ("-2**63-1", b'{"input": {"n": -9223372036854775809}}', "body.input.n: the integer"),
    ("long-int", b'{"value": [0, ' + b"7" * 5000 + b"]}", "body.value[1]: the integer 7777"),
    ("1e400", b'{"result": {"x": 1e400}}', "body.result.x: the number 1e400 is beyond"),
    ("-1e400", b'{"prompt": [-1e400]}', "body.prompt[0]: the number -1e400 is beyond"),
    ("odd-key", b'{"value": {"a b": 99999999999999999999}}', 'body.value["a b"]: the integer'),
]


@pytest.mark.parametrize(("raw", "where"), [c[1:] for c in READ], ids=[c[0] for c in READ])
def test_the_reader_refuses_numbers_it_would_not_keep(raw: bytes, where: str) -> None:
    with pytest.raises(InexactNumberError) as refused:
        loads_exact(raw, root="body")
    assert str(refused.value).startswith(where)


KEPT: list[tuple[str, bytes, Any]] = [
    ("2**64-1", b'{"v": 18446744073709551615}', {"v": 2**64 - 1}),
    ("-2**63", b'{"v": -9223372036854775808}', {"v": -(2**63)}),
    # Floats as large as big integers are floats, written so: kept (they round-trip as floats).
    ("big-floats", b'{"v": [1.8446744073709552e19, 1e300, -9.3e18, 18446744073709551617.0]}', None),
    ("1e308", b'{"v": 1e308}', {"v": 1e308}),
]


@pytest.mark.parametrize(("raw", "expected"), [c[1:] for c in KEPT], ids=[c[0] for c in KEPT])
def test_the_reader_keeps_what_json_keeps(raw: bytes, expected: Any) -> None:
    value = loads_exact(raw, root="body")
    assert value == (orjson.loads(raw) if expected is None else expected)
    assert orjson.loads(orjson.dumps(value)) == value


def test_the_reader_keeps_its_other_refusals() -> None:
    for malformed in (b'{"v": NaN}', b'{"v": Infinity}', b"{not json", b'{"v": 1', b"\xff"):
        with pytest.raises(orjson.JSONDecodeError):
            loads_exact(malformed)
    with pytest.raises(JSONTooDeepError):
        loads_exact(b"[" * 65 + b"]" * 65, max_depth=64)
    # Too deep for orjson itself: still malformed, however it would be read otherwise.
    with pytest.raises(orjson.JSONDecodeError):
        loads_exact(b"[" * 100_000 + b"1e400" + b"]" * 100_000)


def _request(body: bytes) -> Request:
    sent = False

    async def receive() -> dict[str, Any]:
        nonlocal sent
        if sent:
            return {"type": "http.disconnect"}
        sent = True
        return {"type": "http.request", "body": body, "more_body": False}

    headers = [(b"content-length", str(len(body)).encode())]
    return Request({"type": "http", "method": "POST", "path": "/", "headers": headers}, receive)


async def test_an_http_body_with_such_a_number_is_a_422_validation_error() -> None:
    with pytest.raises(ApiError) as refused:
        await read_json(_request(b'{"payload": {"account": 18446744073709551617}}'))
    assert (refused.value.status, refused.value.code) == (422, "validation_error")
    assert refused.value.message.startswith("body.payload.account: the integer 18446744073709551617 ")
    with pytest.raises(ApiError) as overflow:
        await read_json(_request(b'{"value": 1e400}'))
    assert (overflow.value.status, overflow.value.code) == (422, "validation_error")
    with pytest.raises(ApiError) as nan:
        await read_json(_request(b'{"value": NaN}'))
    assert (nan.value.status, nan.value.code) == (400, "invalid_json")  # not JSON at all
    assert await read_json(_request(b'{"v": 18446744073709551615}')) == {"v": 2**64 - 1}


def test_the_console_reads_answers_as_the_server_does() -> None:
    with pytest.raises(ValueError, match=r"^not JSON the server keeps exactly: \$\.account: the integer"):
        parse_json_field('{"account": 18446744073709551617}', note_key="note")
    assert parse_json_field('{"account": 18446744073709551615}', note_key=None) == {"account": 2**64 - 1}


def test_the_cli_reads_arguments_as_the_server_does() -> None:
    """It used to turn an integer beyond 64 bits into a float, as the server then read it."""
    with pytest.raises(CliError) as refused:
        json_argument("--payload", '{"account": 18446744073709551617}')
    assert str(refused.value).startswith("--payload: not JSON the server keeps exactly: $.account: ")
    with pytest.raises(CliError, match=r"^--response: not JSON the server keeps exactly: \$\[0\]: "):
        json_argument("--response", "[1e400]")
    with pytest.raises(CliError, match=r"^--payload: not valid JSON"):
        json_argument("--payload", "NaN")
