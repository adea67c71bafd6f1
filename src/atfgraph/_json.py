"""JSON in and out: orjson everywhere, and the limits the server enforces on what it accepts.

A value is kept exactly or refused: integers from -2**63 to 2**64-1 (orjson refuses to write
larger ones and reads them as floats), finite numbers (orjson writes NaN and ±Infinity as null,
and refuses a literal too large for a double). :func:`dumps` refuses the others with
:class:`SerializationError`, :func:`loads_exact` with :class:`InexactNumberError`; both say where
the number is (``body.input.account``). The rule is the engine's (``pyworkflow._serde``)."""

from __future__ import annotations

import dataclasses
import enum
import json
import math
from typing import Any

import orjson

from ._errors import SerializationError

#: Largest request body the server reads (bytes).
MAX_BODY_BYTES = 1024 * 1024
#: Deepest nesting of arrays and objects accepted in a request body.
MAX_DEPTH = 64
#: The integers a value keeps exactly.
INT_MIN = -(2**63)
INT_MAX = 2**64 - 1
_TWO_63 = float(2**63)  # orjson reads an integer beyond 64 bits as a float at least this large


class JSONTooDeepError(ValueError):
    """The document nests arrays/objects deeper than allowed."""


class InexactNumberError(ValueError):
    """The document holds a number that would not be kept exactly (an integer beyond 64 bits, a
    number too large for a double)."""


def dumps(value: Any, *, what: str = "the value", root: str = "$") -> bytes:
    """``value`` as JSON; :class:`SerializationError` naming ``what`` (and where inside it, from
    ``root``) for a value that is not JSON or would not come back exactly."""
    try:
        data = orjson.dumps(value)
    except TypeError as exc:  # orjson.JSONEncodeError
        raise SerializationError(f"{what} cannot be stored as JSON: {inexact(value, root) or exc}") from None
    if data.find(b"null") >= 0:  # not ``in``: bytes.__contains__ formats a TypeError first
        # NaN and ±Infinity were written as null. A value that reads back equal (one C-level
        # comparison) holds none; only one that does not (or a tuple, a dataclass...) is walked.
        try:
            same = bool(orjson.loads(data) == value)
        except Exception:
            same = False
        if not same and (problem := inexact(value, root)) is not None:
            raise SerializationError(f"{what} cannot be stored as JSON: {problem}")
    return data


def dumps_read(value: Any) -> bytes:
    """A value that :func:`loads_exact` returned (a request body's field), as JSON again. Nothing
    in it can change, so it is not checked again (the check costs a decode when a null is there)."""
    return orjson.dumps(value)


def loads(data: bytes | str) -> Any:
    return orjson.loads(data)


def loads_exact(raw: bytes | str, *, root: str = "body", max_depth: int | None = None) -> Any:
    """Parse ``raw`` as orjson does, refusing what it would not keep exactly: an integer beyond
    64 bits (orjson reads a float) or a number too large for a double (orjson refuses the whole
    document as malformed) raises :class:`InexactNumberError` naming where it is. With
    ``max_depth``, deeper nesting raises :class:`JSONTooDeepError` first. Malformed JSON raises
    ``orjson.JSONDecodeError``."""
    try:
        value = orjson.loads(raw)
    except orjson.JSONDecodeError:
        if (problem := _inexact_number(raw, root)) is not None:
            raise InexactNumberError(problem) from None
        raise
    if _scan(value, max_depth) and (problem := _inexact_number(raw, root)) is not None:
        raise InexactNumberError(problem)
    return value


def check_depth(value: Any, limit: int = MAX_DEPTH) -> None:
    """Raise JSONTooDeepError when ``value`` nests containers more than ``limit`` levels.

    Iterative, so a hostile document cannot exhaust the interpreter's stack while being checked."""
    stack: list[tuple[Any, int]] = [(value, 1)]
    while stack:
        item, depth = stack.pop()
        if isinstance(item, dict):
            children: Any = item.values()
        elif isinstance(item, list):
            children = item
        else:
            continue
        if depth > limit:
            raise JSONTooDeepError(f"JSON nests deeper than {limit} levels")
        stack.extend((child, depth + 1) for child in children if isinstance(child, dict | list))


def fragment(data: bytes | None) -> orjson.Fragment | None:
    """Embed stored JSON bytes into a response without decoding and re-encoding them."""
    return None if data is None else orjson.Fragment(data)


# -- finding the number that would change --------------------------------------------------------


def _scan(value: Any, max_depth: int | None) -> bool:
    """Check the nesting (with ``max_depth``) of a decoded document and say whether it holds a
    float of magnitude 2**63 or more: only there can orjson have put an integer beyond 64 bits."""
    limit = math.inf if max_depth is None else max_depth
    suspect = False
    stack: list[tuple[Any, int]] = [(value, 1)]
    while stack:
        item, depth = stack.pop()
        if isinstance(item, dict):
            children: Any = item.values()
        elif isinstance(item, list):
            children = item
        else:
            suspect = suspect or (type(item) is float and abs(item) >= _TWO_63)
            continue
        if depth > limit:
            raise JSONTooDeepError(f"JSON nests deeper than {max_depth} levels")
        for child in children:
            if isinstance(child, dict | list):
                stack.append((child, depth + 1))
            elif type(child) is float and abs(child) >= _TWO_63:
                suspect = True
    return suspect


class _Literal:
    """A number literal that would not be kept exactly, as the stdlib parser met it."""

    def __init__(self, text: str, integer: bool) -> None:
        self.text = text
        self.integer = integer


def _exact_int(text: str) -> int | _Literal:
    if len(text) > 21:  # more digits than any 64-bit integer (and int() would refuse a long one)
        return _Literal(text, True)
    value = int(text)
    return value if INT_MIN <= value <= INT_MAX else _Literal(text, True)


def _finite_float(text: str) -> float | _Literal:
    value = float(text)
    return value if math.isfinite(value) else _Literal(text, False)


def _not_json(name: str) -> Any:
    raise ValueError(f"{name} is not JSON")


def _inexact_number(raw: bytes | str, root: str) -> str | None:
    """Read ``raw`` again, exactly (the stdlib parser, keeping every number literal), and describe
    the first number that orjson would not keep; None if there is none or it is not JSON."""
    try:
        text = raw.decode() if isinstance(raw, bytes | bytearray) else raw
        value = json.loads(text, parse_int=_exact_int, parse_float=_finite_float, parse_constant=_not_json)
    except (ValueError, RecursionError):
        return None
    stack: list[tuple[Any, str]] = [(value, root)]
    while stack:
        item, path = stack.pop()
        if isinstance(item, _Literal):
            shown = (
                item.text if len(item.text) <= 40 else f"{item.text[:20]}... ({len(item.text)} characters)"
            )
            if item.integer:
                return _describe_int(path, f"the integer {shown}")
            return (
                f"{path}: the number {shown} is beyond the range of a 64-bit float "
                "(it would read as ±Infinity)"
            )
        if isinstance(item, dict):
            stack.extend((v, path + _key_path(k)) for k, v in reversed(item.items()))
        elif isinstance(item, list):
            stack.extend((v, f"{path}[{i}]") for i, v in reversed(list(enumerate(item))))
    return None


def inexact(value: Any, root: str = "$") -> str | None:
    """The first number in ``value`` that JSON would not keep exactly (an integer outside
    ``INT_MIN..INT_MAX``, NaN, ±Infinity), described with its path; None when there is none."""
    stack: list[tuple[Any, str, int]] = [(value, root, 0)]
    seen: set[int] = set()  # containers already looked at: shared or circular references
    while stack:
        item, path, level = stack.pop()
        if item is None or isinstance(item, str | bool):
            continue
        if isinstance(item, int):
            if not INT_MIN <= item <= INT_MAX:
                bits = item.bit_length()
                shown = f"the integer {item}" if bits <= 256 else f"an integer of {bits} bits"
                return _describe_int(path, shown)
            continue
        if isinstance(item, float):
            if not math.isfinite(item):
                return f"{path}: {float(item)!r} is not a JSON number (NaN and Infinity cannot be stored)"
            continue
        if level >= 256 or id(item) in seen:  # orjson writes nothing deeper
            continue
        if isinstance(item, dict):
            children = [(v, path + _key_path(k)) for k, v in item.items()]
        elif isinstance(item, list | tuple):
            children = [(v, f"{path}[{i}]") for i, v in enumerate(item)]
        elif dataclasses.is_dataclass(item) and not isinstance(item, type):
            children = [(getattr(item, f.name), path + _key_path(f.name)) for f in dataclasses.fields(item)]
        elif isinstance(item, enum.Enum):
            children = [(item.value, path)]
        else:
            continue
        seen.add(id(item))
        stack.extend((child, where, level + 1) for child, where in reversed(children))
    return None


def _describe_int(path: str, shown: str) -> str:
    return (
        f"{path}: {shown} does not fit in 64 bits (JSON integers are kept exactly from -2**63 "
        "to 2**64-1); send it as a string"
    )


def _key_path(key: Any) -> str:
    if isinstance(key, str) and key.isidentifier():
        return f".{key}"
    if isinstance(key, str):
        return f"[{orjson.dumps(key).decode()}]"
    return f"[{key!r}]"
