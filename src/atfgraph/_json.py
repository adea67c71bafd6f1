"""JSON in and out: orjson everywhere, and the limits the server enforces on what it accepts.

A value is kept exactly or refused: integers from -2**63 to 2**64-1 (orjson refuses to write
larger ones and reads them as floats), finite numbers (orjson writes NaN and ±Infinity as null,
and refuses a literal too large for a double). :func:`dumps` refuses the others with
:class:`SerializationError`, saying where the number is (``body.input.account``). The rule is
the engine's (``pyworkflow._serde``)."""

from __future__ import annotations

import dataclasses
import enum
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


class JSONTooDeepError(ValueError):
    """The document nests arrays/objects deeper than allowed."""


def dumps(value: Any, *, what: str = "the value", root: str = "$") -> bytes:
    """``value`` as JSON; :class:`SerializationError` naming ``what`` (and where inside it, from
    ``root``) for a value that is not JSON or would not come back exactly."""
    try:
        data = orjson.dumps(value)
    except TypeError as exc:  # orjson.JSONEncodeError
        raise SerializationError(f"{what} cannot be stored as JSON: {inexact(value, root) or exc}") from None
    if b"null" in data:
        # NaN and ±Infinity were written as null. A value that reads back equal (one C-level
        # comparison) holds none; only one that does not (or a tuple, a dataclass...) is walked.
        try:
            same = bool(orjson.loads(data) == value)
        except Exception:
            same = False
        if not same and (problem := inexact(value, root)) is not None:
            raise SerializationError(f"{what} cannot be stored as JSON: {problem}")
    return data


def loads(data: bytes | str) -> Any:
    return orjson.loads(data)


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
