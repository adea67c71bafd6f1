"""The OpenAPI document the server generates, made to say what the server does.

FastAPI generates the operations, their query parameters and (from ``_schemas``) their answers.
Bodies are read by hand (``_body``), so each route declares its body with ``_routes._doc`` (size,
nesting and field bounds). Here the rest is added once for every operation, from the code that
decides it:

- each path parameter's length (``EdgeGuard`` refuses a longer segment with 404);
- the one error shape (``_schemas.ErrorBody``) on every 4xx and 5xx an operation can answer,
  instead of FastAPI's ``detail`` (``HTTPValidationError``), which the server never sends;
- the ``bearerAuth`` security scheme, and on each operation the permissions it needs and the
  roles that have them (from ``_auth.RULES`` and ``_identity.ROLE_PERMISSIONS``); the public
  operations (the signed webhook delivery, the health checks) say they need none;
- the limits, in the document's description.
"""

from __future__ import annotations

import re
from typing import Any

from fastapi import FastAPI
from fastapi.openapi.utils import get_openapi

from .._json import MAX_BODY_BYTES, MAX_DEPTH
from ._auth import PUBLIC, rule_for
from ._body import MAX_INT, MAX_KEY, MAX_STEPS
from ._body_schema import JSON_SCHEMAS
from ._identity import ROLE_PERMISSIONS, Permission
from ._schemas import ErrorBody

_ERROR_REF = {"$ref": "#/components/schemas/ErrorBody"}
#: What each error status means in this API (the codes are in docs/atfgraph.md, "Errors").
ERROR_STATUSES: dict[int, str] = {
    400: "invalid_json, json_too_deep, invalid_request (a NUL in the query)",
    401: "unauthenticated: no valid bearer token",
    403: "forbidden: the token's role lacks the permission, or a worker acts outside its task lease",
    404: "not_found",
    409: "a conflict with the current state (approval_decided, lease_lost, revision_conflict, ...)",
    413: "payload_too_large: a body of more than 1 MiB",
    422: "validation_error: a field, query parameter or value out of its bounds",
    500: "internal_error (a bug: logged)",
    503: "database_unavailable (with Retry-After): retry",
}
_HEADERS: dict[int, dict[str, Any]] = {
    401: {"WWW-Authenticate": {"schema": {"type": "string"}, "description": 'Bearer realm="atfgraph"'}},
    503: {"Retry-After": {"schema": {"type": "integer"}, "description": "seconds"}},
}


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
        "timeout 0 to 60 s); a NUL is 400 invalid_request.\n\n"
        "Lists answer a page: `limit` items at most and `next_cursor`, the opaque cursor of the "
        "next page (pass it as `after`), null on the last page. Nothing is cut off silently.\n\n"
        "Timestamps (every `*_at` field, `at`, `last_seen`) are Unix seconds, UTC, as JSON numbers, "
        "each with the same instant in ISO 8601 UTC beside it (`created_at_iso`).\n\n"
        "Authentication: `Authorization: Bearer <token>` on every operation but those marked "
        "public; each operation names the permissions it needs and the roles that have them. "
        "A method a path does not have is 405 method_not_allowed with an `Allow` header."
    )


def install_limits(app: FastAPI, *, max_path_segment: int) -> None:
    """Generate ``app``'s OpenAPI document with the API's limits, errors and security in it
    (once, then cached)."""

    def openapi() -> dict[str, Any]:
        if app.openapi_schema is None:
            doc = get_openapi(
                title=app.title,
                version=app.version,
                description=f"{app.description}\n\n{limits_text(max_path_segment)}",
                routes=app.routes,
            )
            components = doc.setdefault("components", {})
            schemas = components.setdefault("schemas", {})
            for unused in ("HTTPValidationError", "ValidationError"):
                schemas.pop(unused, None)
            error = ErrorBody.model_json_schema(ref_template="#/components/schemas/{model}")
            schemas.update(error.pop("$defs", {}))
            schemas["ErrorBody"] = error
            schemas.update(JSON_SCHEMAS)
            components["securitySchemes"] = {
                "bearerAuth": {
                    "type": "http",
                    "scheme": "bearer",
                    "description": "a token minted by POST /api/v2/tokens or on the first start "
                    "(atfg_<id>_<secret>); its role decides what it may call",
                }
            }
            for path, item in doc.get("paths", {}).items():
                for method, operation in item.items():
                    if isinstance(operation, dict):
                        _bound_path_parameters(operation, max_path_segment)
                        _declare_errors_and_security(path, method, operation)
            app.openapi_schema = doc
        return app.openapi_schema

    app.openapi = openapi  # type: ignore[method-assign]


def allowed_methods(app: FastAPI, path: str) -> list[str]:
    """The methods the document lists for ``path`` (a 405's ``Allow`` header; empty for a path
    it does not list). Starlette names the methods of one route only, and a path may be served
    by several (GET and POST /api/v2/tokens)."""
    table: list[tuple[re.Pattern[str], list[str]]] | None = getattr(app.state, "allow_table", None)
    if table is None:
        table = [
            (re.compile(_TEMPLATE.sub("[^/]+", template)), [m.upper() for m in item])
            for template, item in app.openapi().get("paths", {}).items()
        ]
        app.state.allow_table = table
    return sorted({m for pattern, methods in table if pattern.fullmatch(path) for m in methods})


#: No query parameter may hold a NUL (``EdgeGuard``: 400 invalid_request).
_NO_NUL = "^[^\\u0000]*$"


def _no_nul(schema: dict[str, Any]) -> None:
    for variant in schema.get("anyOf", [schema]):
        if variant.get("type") == "string" and "pattern" not in variant and "enum" not in variant:
            variant["pattern"] = _NO_NUL


def _bound_path_parameters(operation: dict[str, Any], max_path_segment: int) -> None:
    for parameter in operation.get("parameters", []):
        if parameter.get("in") == "query":
            schema = parameter.get("schema", {})
            _no_nul(schema.get("items", schema) if schema.get("type") == "array" else schema)
        if parameter.get("in") == "path":
            parameter.setdefault("schema", {}).update(minLength=1, maxLength=max_path_segment)
            parameter.setdefault(
                "description", f"at most {max_path_segment} characters; a longer one is 404 not_found"
            )


_TEMPLATE = re.compile(r"\{[^/}]+\}")


def roles_with(permission: Permission) -> list[str]:
    return [role.value for role, granted in ROLE_PERMISSIONS.items() if permission in granted]


def _declare_errors_and_security(path: str, method: str, operation: dict[str, Any]) -> None:
    concrete = _TEMPLATE.sub("x", path)
    public = PUBLIC.fullmatch(concrete) is not None or not concrete.startswith("/api/")
    statuses = {400, 500, 503}
    parameters = operation.get("parameters", [])
    if parameters:
        statuses.add(422)
    if any(p.get("in") == "path" for p in parameters):
        statuses.add(404)
    if any(p.get("name") == "epoch" for p in parameters):
        statuses.add(409)  # a read under a task lease: lease_lost
    if "requestBody" in operation:
        statuses |= {404, 413, 422}
    if method in ("post", "put"):
        statuses |= {404, 409, 422}
    if public:
        operation["security"] = []
        if concrete.startswith("/api/"):
            statuses.add(401)  # a signed delivery with a bad signature
    else:
        operation["security"] = [{"bearerAuth": []}]
        statuses |= {401, 403}
        rule = rule_for(method.upper(), concrete)
        if rule is not None:
            operation["description"] = (operation.get("description", "") + "\n\n" + _needs(rule)).strip()
    responses = operation.setdefault("responses", {})
    for status in sorted(statuses):
        answer: dict[str, Any] = {
            "description": ERROR_STATUSES[status],
            "content": {"application/json": {"schema": _ERROR_REF}},
        }
        if status in _HEADERS:
            answer["headers"] = _HEADERS[status]
        responses[str(status)] = answer
    operation["responses"] = dict(sorted(responses.items()))


def _needs(rule: Any) -> str:
    parts = []
    for permission in sorted(rule.allowed, key=lambda p: p.value):
        roles = ", ".join(roles_with(permission))
        leased = " (only under the task lease it holds)" if permission in rule.leased else ""
        parts.append(f"`{permission.value}`{leased}: {roles}")
    return f"**Authorization** ({rule.action}): bearerAuth with " + "; or ".join(parts) + "."


__all__ = ["ERROR_STATUSES", "allowed_methods", "install_limits", "limits_text"]
