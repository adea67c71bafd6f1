"""The JSON Schemas of the hand-read request bodies (``_body``), as the OpenAPI document states
them: each building block here says exactly what the check it names accepts, from the same
constants, so that what the document calls valid is accepted and what it calls invalid is
refused (Schemathesis checks both against a live server).

What ``_body.Fields`` does, and so what every body schema says:
- a field that is absent or ``null`` is the same (an optional field also accepts ``null``; a
  required one refuses it);
- fields a route does not read are ignored, but are JSON values like any other: integers within
  -2**63..2**64-1 (``JsonValue``);
- an identifier (``Fields.key``) is 1 to MAX_KEY characters without NUL;
- an integer field (``Fields.integer``) takes a whole number, ``3`` or ``3.0``, within bounds.
"""

from __future__ import annotations

from typing import Any

from .._json import MAX_BODY_BYTES, MAX_DEPTH
from ._body import MAX_INT, MAX_KEY, MAX_MESSAGE, MAX_STEPS, TEXT_PATTERN

#: What every request body is held to (``_body.read_json``), said in each body's description.
BODY_LIMITS = (
    f"A JSON object of at most {MAX_BODY_BYTES} bytes (1 MiB; more is 413 payload_too_large), "
    f"nested at most {MAX_DEPTH} levels deep (deeper is 400 json_too_deep). Integers in any value "
    "are kept exactly from -2**63 to 2**64-1 and numbers must fit a 64-bit float (else 422 "
    "validation_error); integer fields are at most 2147483647. A field that is null counts as absent."
)

#: Any JSON value the server keeps exactly (``_json.loads_exact``): the document's component.
JSON = {"$ref": "#/components/schemas/JsonValue"}
#: Any JSON value but null (a required value: ``null`` counts as absent).
PRESENT = {"$ref": "#/components/schemas/JsonPresent"}
#: The JSON values ``loads_exact`` keeps, one flat list of alternatives (a nested ``anyOf`` would
#: read the same, but Schemathesis' negative cases then take one alternative for the whole): an
#: integer within 64 bits, or any number with a fraction, and the rest of JSON.
_PRESENT_KINDS: list[dict[str, Any]] = [
    {"type": "boolean"},
    {"type": "string"},
    {"type": "integer", "minimum": -(2**63), "maximum": 2**64 - 1},
    {"type": "number", "not": {"type": "integer"}},
    {"type": "array", "items": JSON},
    {"type": "object", "additionalProperties": JSON},
]
JSON_SCHEMAS: dict[str, Any] = {
    "JsonValue": {
        "description": f"any JSON value, nested at most {MAX_DEPTH} levels; integers within -2**63..2**64-1",
        "anyOf": [{"type": "null"}, *_PRESENT_KINDS],
    },
    "JsonPresent": {"description": "any JSON value but null", "anyOf": _PRESENT_KINDS},
}

#: An identifier field (``Fields.key``): non-empty, at most MAX_KEY characters, no NUL.
KEY = {"type": "string", "minLength": 1, "maxLength": MAX_KEY, "pattern": "^[^\\u0000]*$"}


def text(max_length: int, min_length: int = 0) -> dict[str, Any]:
    """A name or label a person reads (``_body.TEXT_PATTERN``: no control, separator, zero-width or
    bidirectional-override character)."""
    return {"type": "string", "minLength": min_length, "maxLength": max_length, "pattern": TEXT_PATTERN}


def number(maximum: float, *, positive: bool = False) -> dict[str, Any]:
    """``Fields.number`` from 0 (or above 0) to ``maximum``."""
    bound = {"exclusiveMinimum": 0} if positive else {"minimum": 0}
    return {"type": "number", **bound, "maximum": maximum}


def integer(minimum: int = 0, maximum: int = MAX_INT) -> dict[str, Any]:
    return {"type": "integer", "minimum": minimum, "maximum": maximum}


def obj(properties: dict[str, Any], required: list[str] = ()) -> dict[str, Any]:  # type: ignore[assignment]
    """A JSON object read with ``Fields``: its optional fields may be null, the rest is ignored."""
    return {
        "type": "object",
        "properties": {
            name: schema
            if name in required or schema in (JSON, {})
            else {"anyOf": [schema, {"type": "null"}]}
            for name, schema in properties.items()
        },
        "required": list(required),
        "additionalProperties": JSON,
    }


def closed(properties: dict[str, Any], min_properties: int = 0) -> dict[str, Any]:
    """A JSON object that may hold only these fields (``_assign``'s assignees)."""
    return {
        "type": "object",
        "properties": properties,
        "additionalProperties": False,
        "minProperties": min_properties,
    }


def given(name: str, schema: dict[str, Any]) -> dict[str, Any]:
    """A condition: ``name`` is present, not null, and matches ``schema``."""
    return {"properties": {name: schema}, "required": [name]}


def needs(name: str, kind: str, other: str, other_kind: str) -> dict[str, Any]:
    """``Fields.lease``'s pairing rules: when ``name`` is given (not null), ``other`` must be."""
    return {"if": given(name, {"type": kind}), "then": given(other, {"type": other_kind})}


def lease_rules(id_field: str | None, paired: bool = True) -> list[dict[str, Any]]:
    """What ``Fields.lease(id_field, paired)`` refuses, as conditions on the body: a worker id
    needs an epoch; an epoch needs the traverser's id (unless the path names it); with
    ``paired``, the id needs an epoch."""
    rules = [needs("worker_id", "string", "epoch", "integer")]
    if id_field is not None:
        rules.append(needs("epoch", "integer", id_field, "string"))
        if paired:
            rules.append(needs(id_field, "string", "epoch", "integer"))
    return rules


def body(
    properties: dict[str, Any], required: list[str], rules: list[dict[str, Any]] | None = None
) -> dict[str, Any]:
    """An OpenAPI request body for a hand-read JSON object, with the limits it is read under and
    the ``rules`` that tie its fields together."""
    schema = obj(properties, required)
    if rules:
        schema["allOf"] = rules
    return {
        "requestBody": {
            "required": True,
            "description": BODY_LIMITS,
            "content": {"application/json": {"schema": schema}},
        }
    }


INT = integer()
#: An error a worker reports (``_body.error_info``).
ERROR = obj({"code": KEY, "message": {"type": "string", "maxLength": MAX_MESSAGE}}, ["code", "message"])
#: The child steps a worker reports with a write (``Fields.steps``).
STEPS = {
    "type": "array",
    "maxItems": MAX_STEPS,
    "items": obj(
        {
            "key": KEY,
            "seq": INT,
            "target": KEY,
            "status": {"enum": ["succeeded", "failed"]},
            "result": JSON,
            "error": ERROR,
        },
        ["key", "seq", "target", "status"],
    ),
}

__all__ = [
    "BODY_LIMITS",
    "ERROR",
    "INT",
    "JSON",
    "JSON_SCHEMAS",
    "KEY",
    "PRESENT",
    "STEPS",
    "body",
    "closed",
    "integer",
    "lease_rules",
    "number",
    "obj",
    "text",
]
