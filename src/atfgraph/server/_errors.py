"""The one error shape of the HTTP API: ``{"error": {"code": ..., "message": ...}}``.

Codes are stable and documented in docs/atfgraph.md; clients map them to typed exceptions."""

from __future__ import annotations

import sqlite3

from pyworkflow import DatabaseUnavailableError
from pyworkflow.store import database_failed, over_a_database_limit

from ._dburl import first_line
from ._refusals import Conflict, Forbidden, Invalid, LeaseLost, NotFound, Refusal


class ApiError(Exception):
    """An expected failure of a request at the HTTP edge (a malformed body, a forbidden call),
    with its HTTP status and stable code. The store and the service raise domain refusals
    (``_refusals``) instead; :func:`api_error` gives each its status."""

    def __init__(self, status: int, code: str, message: str) -> None:
        super().__init__(message)
        self.status = status
        self.code = code
        self.message = message


#: The HTTP status of each kind of refusal.
_STATUS: dict[type[Refusal], int] = {
    NotFound: 404,
    LeaseLost: 409,
    Forbidden: 403,
    Conflict: 409,
    Invalid: 422,
    Refusal: 409,
}


def api_error(exc: Refusal | ApiError) -> ApiError:
    """The edge's view of a refusal: its status and code in the one error shape."""
    if isinstance(exc, ApiError):
        return exc
    status = next(code for kind, code in _STATUS.items() if isinstance(exc, kind))
    return ApiError(status, exc.code, exc.message)


def bad_request(message: str, code: str = "validation_error") -> ApiError:
    return ApiError(422, code, message)


#: Seconds a client is told to wait (Retry-After) when the database cannot be reached.
RETRY_AFTER_SECONDS = 1


def database_unavailable(exc: BaseException) -> ApiError | None:
    """A 503 for a failure to reach or use the database (PostgreSQL down or restarting, a
    connection lost, a lock held elsewhere past the write timeout, SQLite's file deleted or
    replaced: ``pyworkflow.DatabaseUnavailableError``), which a retry may cure; None for
    anything else. Clients and workers treat 503 like an unreachable server and retry."""
    if isinstance(exc, DatabaseUnavailableError):
        return ApiError(503, "database_unavailable", f"the server's database is unavailable: {exc.message}")
    # The store's one rule: not a statement SQLite cannot run (a bug: a 500), nor PostgreSQL's
    # class 54 (a value too large for an index entry: database_refused).
    if not database_failed(exc):
        return None
    reason = first_line(exc)[:300]
    return ApiError(503, "database_unavailable", f"the server's database is unavailable: {reason}")


def database_refused(exc: BaseException) -> ApiError | None:
    """A 422 for a value the database refused (psycopg's DataError family: a NUL in text, a
    number out of range, an invalid text representation; SQLSTATE class 54: a value too large
    for an index entry; SQLite's DataError: a value too big); None for anything else.

    The server refuses such values before the database (the edge's path checks, the body's
    field checks, the audit trail's bounds), so that both backends answer alike and a denial is
    still audited; this is the backstop for a value those checks miss: the transaction rolled
    back and changed nothing, and retrying the same request cannot succeed, so it is neither a
    500 nor a 503."""
    refused = isinstance(exc, sqlite3.DataError)
    if not refused and type(exc).__module__.startswith("psycopg"):
        import psycopg

        refused = isinstance(exc, psycopg.DataError) or (
            isinstance(exc, psycopg.Error) and over_a_database_limit(exc)
        )
    if not refused:
        return None
    reason = first_line(exc)[:300]
    return ApiError(422, "validation_error", f"the database refused a value of this request: {reason}")
