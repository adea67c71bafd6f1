"""The one error shape of the HTTP API: ``{"error": {"code": ..., "message": ...}}``.

Codes are stable and documented in docs/atfgraph.md; clients map them to typed exceptions."""

from __future__ import annotations


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
