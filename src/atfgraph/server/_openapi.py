"""The limits of the HTTP API in the OpenAPI document the server generates: the document says
what the server refuses, from the constants its checks use. Bodies are read by hand (``_body``),
so each route declares its body with ``_routes._doc`` (size, nesting and field bounds); here the
rest is added to the generated document once for every route: each path parameter's length
(``EdgeGuard`` refuses a longer segment with 404) and the limits in the document's description."""

from __future__ import annotations

from typing import Any

from fastapi import FastAPI
from fastapi.openapi.utils import get_openapi

from .._json import MAX_BODY_BYTES, MAX_DEPTH
from ._body import MAX_INT, MAX_KEY, MAX_STEPS


def limits_text(max_path_segment: int) -> str:
    """The API's limits, as the document's description states them."""
    return (
        "Limits (a request beyond one changes nothing):\n\n"
        f"- request body: a JSON object of at most {MAX_BODY_BYTES} bytes (1 MiB; more is 413 "
        f"payload_too_large), nested at most {MAX_DEPTH} levels (deeper is 400 json_too_deep);\n"
        "- numbers: integers are kept exactly from -2**63 to 2**64-1, other numbers must fit a "
        "64-bit float (else 422 validation_error); NaN and Infinity are not JSON (400 invalid_json);\n"
        f"- identifier fields (names, keys, targets, ids in a body): 1 to {MAX_KEY} characters, no NUL "
        f"(422); integer fields at most {MAX_INT}; at most {MAX_STEPS} child steps per write;\n"
        f"- path segments (ids, checkpoint names, memory scopes and keys): at most {max_path_segment} "
        "characters, no NUL (404 not_found);\n"
        "- query parameters: as each declares (limit 1 to 1000, wait_for at most 200 characters, "
        "timeout 0 to 60 s); a NUL is 400 invalid_request."
    )


def install_limits(app: FastAPI, *, max_path_segment: int) -> None:
    """Generate ``app``'s OpenAPI document with the API's limits in it (once, then cached)."""

    def openapi() -> dict[str, Any]:
        if app.openapi_schema is None:
            doc = get_openapi(
                title=app.title,
                version=app.version,
                description=f"{app.description}\n\n{limits_text(max_path_segment)}",
                routes=app.routes,
            )
            for item in doc.get("paths", {}).values():
                for operation in item.values():
                    _bound_path_parameters(operation, max_path_segment)
            app.openapi_schema = doc
        return app.openapi_schema

    app.openapi = openapi  # type: ignore[method-assign]


def _bound_path_parameters(operation: Any, max_path_segment: int) -> None:
    if not isinstance(operation, dict):
        return
    for parameter in operation.get("parameters", []):
        if parameter.get("in") == "path":
            parameter.setdefault("schema", {}).update(minLength=1, maxLength=max_path_segment)
            parameter.setdefault(
                "description", f"at most {max_path_segment} characters; a longer one is 404 not_found"
            )


__all__ = ["install_limits", "limits_text"]
