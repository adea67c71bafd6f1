"""The server's outermost ASGI layer (``_app.EdgeGuard``) on its own: paths that cannot name
anything are answered before anything behind it runs (authentication, the audit trail, the
database), and a failure behind it keeps the one error shape. uvicorn never passes an unpaired
surrogate (it decodes with replacement characters), so that case is only reachable here."""

from __future__ import annotations

import sqlite3
from typing import Any

import orjson
import pytest

from atfgraph.server._app import MAX_PATH_SEGMENT, EdgeGuard


async def call(app: Any, path: str, query: bytes = b"") -> tuple[int, dict[str, Any]]:
    sent: list[dict[str, Any]] = []

    async def receive() -> dict[str, Any]:
        return {"type": "http.request", "body": b"", "more_body": False}

    async def send(message: dict[str, Any]) -> None:
        sent.append(message)

    scope = {"type": "http", "method": "POST", "path": path, "query_string": query, "headers": []}
    await app(scope, receive, send)
    status = next(m["status"] for m in sent if m["type"] == "http.response.start")
    body = b"".join(m.get("body", b"") for m in sent if m["type"] == "http.response.body")
    return status, orjson.loads(body)


async def unreachable(scope: Any, receive: Any, send: Any) -> None:
    raise AssertionError(f"{scope['path'][:80]!r} got past the edge")


@pytest.mark.parametrize(
    "segment",
    ["\x00", "a\x00b", "\ud800", "x\udcff", "x" * (MAX_PATH_SEGMENT + 1), "é" * 30_000],
    ids=["NUL", "inner NUL", "high surrogate", "surrogateescape", "one too long", "30,000"],
)
async def test_unnameable_path_segments_are_404_before_anything_runs(segment: str) -> None:
    for path in (f"/api/v2/approvals/{segment}/decide", f"/approvals/{segment}/decide"):
        status, body = await call(EdgeGuard(unreachable), path)
        assert status == 404 and body["error"]["code"] == "not_found", body
        assert set(body["error"]) == {"code", "message"}


async def test_the_longest_allowed_segment_passes_and_failures_keep_the_error_shape() -> None:
    reached: list[str] = []

    async def app(scope: Any, receive: Any, send: Any) -> None:
        reached.append(scope["path"])
        raise ValueError("a bug behind the edge")

    path = f"/api/v2/memory/{'s' * MAX_PATH_SEGMENT}/{'k' * MAX_PATH_SEGMENT}"
    status, body = await call(EdgeGuard(app), path)
    assert reached == [path]
    assert (status, body["error"]["code"]) == (500, "internal_error")
    status, body = await call(EdgeGuard(unreachable), "/api/v2/approvals", b"traverser_id=%00")
    assert (status, body["error"]["code"]) == (400, "invalid_request")


def database_errors() -> list[tuple[str, BaseException, int, str]]:
    import psycopg
    import psycopg.errors

    return [
        (
            "psycopg DataError",
            psycopg.DataError("PostgreSQL text fields cannot contain NUL"),
            422,
            "validation_error",
        ),
        (
            "out of range",
            psycopg.errors.NumericValueOutOfRange("integer out of range"),
            422,
            "validation_error",
        ),
        (
            "index row size",
            psycopg.errors.ProgramLimitExceeded("index row requires 18016 bytes"),
            422,
            "validation_error",
        ),
        ("sqlite too big", sqlite3.DataError("string or blob too big"), 422, "validation_error"),
        (
            "connection lost",
            psycopg.OperationalError("server closed the connection"),
            503,
            "database_unavailable",
        ),
        ("sqlite locked", sqlite3.OperationalError("database is locked"), 503, "database_unavailable"),
        ("sqlite schema bug", _sqlite_error("SELECT * FROM no_such_table"), 500, "internal_error"),
    ]


def _sqlite_error(sql: str) -> sqlite3.OperationalError:
    """The error SQLite itself raises for ``sql`` (with its code, ``SQLITE_ERROR`` here)."""
    conn = sqlite3.connect(":memory:")
    try:
        conn.execute(sql)
    except sqlite3.OperationalError as exc:
        return exc
    finally:
        conn.close()
    raise AssertionError(f"{sql!r} ran")


@pytest.mark.parametrize("case", range(7), ids=[c[0] for c in database_errors()])
async def test_a_value_the_database_refuses_is_422_and_an_outage_503(case: int) -> None:
    """The backstop behind the checks: a value refused by the database is the caller's to fix
    (retrying cannot help), a database that cannot be reached is a 503 to retry, and a statement
    SQLite cannot run (a bug of the server's, which SQLite raises as an ``OperationalError``
    too) is the server's 500, not an outage to retry."""
    _, error, status, code = database_errors()[case]

    async def app(scope: Any, receive: Any, send: Any) -> None:
        raise error

    got, body = await call(EdgeGuard(app), "/api/v2/workers")
    assert (got, body["error"]["code"]) == (status, code), body
