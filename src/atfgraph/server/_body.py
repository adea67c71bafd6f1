"""Reading and checking request bodies by hand: the size cap is enforced while reading, the
nesting cap before anything looks inside, a number the server would not keep exactly (an integer
beyond 64 bits, one too large for a double) is refused rather than rounded, and every failure is
an :class:`ApiError` with a stable code, so a hostile body costs at most 1 MiB of reading and
never reaches the store."""

from __future__ import annotations

import re
from typing import Any

import orjson
from fastapi import Request

from .._json import MAX_BODY_BYTES, MAX_DEPTH, InexactNumberError, JSONTooDeepError, dumps_read, loads_exact
from ._errors import ApiError, bad_request
from ._graph_rows import Lease, StepRecord

#: The longest string an identifier field may hold (names, operation keys, targets, node ids,
#: versions, decisions): short identifiers, not payloads.
MAX_KEY = 512
#: The largest integer a field may hold: PostgreSQL's ``integer``, the type of the columns they go to
#: (epochs, revisions, capacities, step numbers); one more would be refused by the database.
MAX_INT = 2**31 - 1
#: The most child steps one write may report.
MAX_STEPS = 1000
#: The longest error message a worker may report (``error.message``).
MAX_MESSAGE = 10_000
#: The characters a name or label people read may not hold: C0 and C1 controls, zero-width and
#: bidirectional-override marks, line and paragraph separators, invisible operators and the BOM
#: (what would garble or disguise it on a page or in a terminal). As a JSON Schema pattern too.
_HIDDEN = "\\u0000-\\u001f\\u007f-\\u009f\\u200b-\\u200f\\u2028-\\u202e\\u2060-\\u206f\\ufeff"
#: A name or label people read (a link's label, an assignee): none of those characters.
TEXT_PATTERN = f"^[^{_HIDDEN}]*$"
#: The same, and not blank (a token's name).
NAME_PATTERN = f"^[^{_HIDDEN}]*[^\\s{_HIDDEN}][^{_HIDDEN}]*$"
_TEXT = re.compile(TEXT_PATTERN)
_NAME = re.compile(NAME_PATTERN)


def is_text(value: object, *, blank: bool = True) -> bool:
    """Whether ``value`` is a string :data:`TEXT_PATTERN` (or, not ``blank``,
    :data:`NAME_PATTERN`) allows: one rule for the check and the OpenAPI document."""
    return isinstance(value, str) and (_TEXT if blank else _NAME).fullmatch(value) is not None


async def read_json(request: Request) -> dict[str, Any]:
    """The request body as a JSON object."""
    return parse_object(await read_raw(request))


async def read_raw(request: Request) -> bytes:
    """The request body's bytes, within the size cap (a signed body is checked on these)."""
    declared = request.headers.get("content-length")
    if declared is not None:
        try:
            declared_size = int(declared)
        except ValueError:
            raise ApiError(400, "invalid_request", "Content-Length is not a number") from None
        if declared_size > MAX_BODY_BYTES:
            raise _too_large()
    chunks: list[bytes] = []
    size = 0
    async for chunk in request.stream():
        size += len(chunk)
        if size > MAX_BODY_BYTES:
            raise _too_large()
        chunks.append(chunk)
    return b"".join(chunks)


def parse_object(raw: bytes) -> dict[str, Any]:
    """A body's bytes as a JSON object, with the checks of :func:`read_json`."""
    if not raw:
        raise ApiError(400, "invalid_json", "the request body is empty; a JSON object is required")
    try:
        value = loads_exact(raw, root="body", max_depth=MAX_DEPTH)
    except orjson.JSONDecodeError as exc:
        # orjson refuses nesting beyond its own recursion limit with this same error.
        raise ApiError(400, "invalid_json", f"the request body is not valid JSON: {exc}") from None
    except JSONTooDeepError as exc:
        raise ApiError(400, "json_too_deep", str(exc)) from None
    except InexactNumberError as exc:
        # Valid JSON, but a number the server would not keep exactly: refused, not rounded.
        raise bad_request(str(exc)) from None
    if not isinstance(value, dict):
        raise bad_request("the request body must be a JSON object")
    return value


def _too_large() -> ApiError:
    return ApiError(413, "payload_too_large", f"the request body exceeds {MAX_BODY_BYTES} bytes")


class Fields:
    """Typed access to the fields of a JSON object, with one error shape for every mistake."""

    def __init__(self, data: dict[str, Any], where: str = "body") -> None:
        self.data = data
        self.where = where

    def _get(self, name: str, required: bool) -> Any:
        if name not in self.data or self.data[name] is None:
            if required:
                raise bad_request(f"{self.where}.{name} is required")
            return None
        return self.data[name]

    def key(self, name: str, required: bool = True) -> Any:
        """A short non-empty string (an identifier)."""
        value = self._get(name, required)
        if value is None:
            return None
        if not isinstance(value, str) or not value or len(value) > MAX_KEY:
            raise bad_request(
                f"{self.where}.{name} must be a non-empty string of at most {MAX_KEY} characters"
            )
        if "\x00" in value:  # no database text column holds it (PostgreSQL refuses it outright)
            raise bad_request(f"{self.where}.{name} must not contain NUL characters")
        return value

    def integer(self, name: str, required: bool = True, minimum: int = 0, maximum: int = MAX_INT) -> Any:
        value = self._get(name, required)
        if value is None:
            return None
        if isinstance(value, float) and value.is_integer():
            value = int(value)  # 3.0 is the integer 3 (JSON Schema's "integer")
        if isinstance(value, bool) or not isinstance(value, int) or not minimum <= value <= maximum:
            raise bad_request(f"{self.where}.{name} must be an integer from {minimum} to {maximum}")
        return value

    def number(self, name: str, required: bool = True, minimum: float = 0.0, maximum: float = 1e9) -> Any:
        value = self._get(name, required)
        if value is None:
            return None
        if isinstance(value, bool) or not isinstance(value, int | float) or not minimum <= value <= maximum:
            raise bad_request(f"{self.where}.{name} must be a number from {minimum} to {maximum}")
        return float(value)

    def boolean(self, name: str, default: bool) -> bool:
        value = self._get(name, False)
        if value is None:
            return default
        if not isinstance(value, bool):
            raise bad_request(f"{self.where}.{name} must be true or false")
        return value

    def obj(self, name: str, required: bool = True) -> Any:
        value = self._get(name, required)
        if value is None:
            return None
        if not isinstance(value, dict):
            raise bad_request(f"{self.where}.{name} must be a JSON object")
        return value

    def json(self, name: str, required: bool = True) -> bytes | None:
        """Any JSON value, re-serialized for storage (``null`` counts as absent)."""
        value = self._get(name, required)
        return None if value is None else dumps_read(value)

    def lease(
        self, id_field: str = "traverser_id", paired: bool = True, traverser_id: str | None = None
    ) -> Lease | None:
        """The task lease the request names, or None: ``id_field`` (its traverser; or
        ``traverser_id``, the one the path names) with ``epoch`` and ``worker_id`` (the worker
        holding it). ``paired``: ``id_field`` without ``epoch`` is refused (else it may come
        alone, as the approval's traverser)."""
        named = None if traverser_id is not None else self.key(id_field, required=False)
        ident = traverser_id or named
        epoch, worker = self.integer("epoch", required=False), self.key("worker_id", required=False)
        if (epoch is not None and ident is None) or (paired and named is not None and epoch is None):
            raise bad_request(f"{self.where}.{id_field} and {self.where}.epoch go together")
        if worker is not None and epoch is None:
            raise bad_request(f"{self.where}.worker_id needs {self.where}.epoch")
        if epoch is None:
            return None
        assert ident is not None
        return Lease(ident, epoch, worker)

    def steps(self) -> list[StepRecord]:
        """The child steps a worker reports along with a write."""
        raw = self.data.get("steps")
        if raw is None:
            return []
        if not isinstance(raw, list) or len(raw) > MAX_STEPS:
            raise bad_request(f"{self.where}.steps must be a list of at most {MAX_STEPS} steps")
        steps = []
        for index, item in enumerate(raw):
            if not isinstance(item, dict):
                raise bad_request(f"{self.where}.steps[{index}] must be an object")
            f = Fields(item, f"{self.where}.steps[{index}]")
            status = f.key("status")
            if status not in ("succeeded", "failed"):
                raise bad_request(f"{f.where}.status must be 'succeeded' or 'failed'")
            error = f.obj("error", required=False)
            steps.append(
                StepRecord(
                    key=f.key("key"),
                    seq=f.integer("seq"),
                    target=f.key("target"),
                    status=status,
                    result=f.json("result", required=False),
                    error=None
                    if error is None
                    else dumps_read(error_info(Fields(error, f"{f.where}.error"))),
                )
            )
        return steps


def error_info(f: Fields) -> dict[str, str]:
    """A ``{"code", "message"}`` error object, checked."""
    code = f.key("code")
    message = f.data.get("message")
    if not isinstance(message, str) or len(message) > MAX_MESSAGE:
        raise bad_request(f"{f.where}.message must be a string of at most {MAX_MESSAGE} characters")
    return {"code": code, "message": message}
