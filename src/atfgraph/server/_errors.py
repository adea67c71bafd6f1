"""The one error shape of the HTTP API: ``{"error": {"code": ..., "message": ...}}``.

Codes are stable and documented in docs/atfgraph.md; clients map them to typed exceptions."""

from __future__ import annotations

import sqlite3

from ._dburl import first_line


class ApiError(Exception):
    """An expected failure with its HTTP status and stable code; the store raises these too, so a
    rejected transition rolls its transaction back and changes nothing."""

    def __init__(self, status: int, code: str, message: str) -> None:
        super().__init__(message)
        self.status = status
        self.code = code
        self.message = message


def not_found(kind: str, ident: str) -> ApiError:
    return ApiError(404, "not_found", f"{kind} {ident!r} not found")


def lease_lost(traverser_id: str) -> ApiError:
    return ApiError(
        409, "lease_lost", f"the lease on traverser {traverser_id!r} is not held (stale epoch or expired)"
    )


def bad_request(message: str, code: str = "validation_error") -> ApiError:
    return ApiError(422, code, message)


#: Seconds a client is told to wait (Retry-After) when the database cannot be reached.
RETRY_AFTER_SECONDS = 1


def database_unavailable(exc: BaseException) -> ApiError | None:
    """A 503 for a failure to reach or use the database (PostgreSQL down or restarting, a
    connection lost, SQLite locked past its busy timeout), which a retry may cure; None for
    anything else. Clients and workers treat 503 like an unreachable server and retry."""
    unavailable = isinstance(exc, sqlite3.OperationalError)
    if not unavailable and type(exc).__module__.startswith("psycopg"):
        import psycopg

        unavailable = isinstance(exc, psycopg.OperationalError)
    if not unavailable:
        return None
    reason = first_line(exc)[:300]
    return ApiError(503, "database_unavailable", f"the server's database is unavailable: {reason}")
