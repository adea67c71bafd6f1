"""JSON in and out of the store: values are serialized once, kept as bytes until read.

A stored value must come back exactly as it was stored, so numbers JSON would not keep are
refused (``SerializationError``, naming the value and where in it) instead of being changed:
integers outside ``INT_MIN..INT_MAX`` (orjson refuses to write them; read back they would be
floats) and NaN or ±Infinity (orjson writes them as ``null``)."""

from __future__ import annotations

import dataclasses
import enum
import functools
import math
import traceback
from datetime import timedelta
from typing import Any

import orjson

from ._errors import SerializationError

#: Deepest nesting accepted in a stored value (orjson itself refuses deeper than 254).
MAX_DEPTH = 64
#: The integers a stored value keeps exactly: orjson writes and reads these as integers.
INT_MIN = -(2**63)
INT_MAX = 2**64 - 1
#: How deep :func:`inexact` looks (orjson refuses anything deeper, so nothing there was written).
_WALK_DEPTH = 256
_OPTIONS = orjson.OPT_SERIALIZE_NUMPY


def dumps(value: Any, *, what: str = "value") -> bytes:
    """``value`` as JSON bytes; ``SerializationError`` naming ``what`` (and where inside it) for a
    value that is not JSON or would not come back exactly."""
    data = _dumps(value, what)
    if data.find(b"null") >= 0:  # not ``in``: bytes.__contains__ formats a TypeError first
        _check_nulls(value, orjson.loads(data), what)
    return data


def dumps_loads(value: Any, *, what: str = "value") -> tuple[bytes, Any]:
    """:func:`dumps`, and the value as decoded from those bytes: what a reader of them gets."""
    data = _dumps(value, what)
    decoded = orjson.loads(data)
    if data.find(b"null") >= 0:
        _check_nulls(value, decoded, what)
    return data, decoded


def _dumps(value: Any, what: str) -> bytes:
    try:
        return orjson.dumps(value, option=_OPTIONS)
    except (TypeError, orjson.JSONEncodeError) as exc:
        raise SerializationError(f"{what} cannot be stored as JSON: {inexact(value) or exc}") from None


def _check_nulls(value: Any, decoded: Any, what: str) -> None:
    """orjson writes NaN and ±Infinity as null without a word, so output with a null may hide
    one. A value that reads back equal has none (one C-level comparison); only one that does not
    (a NaN, or a tuple, dataclass, datetime... that JSON turns into something else) is walked."""
    try:
        same = bool(decoded == value)
    except Exception:  # a type whose comparison does not answer a bool (numpy arrays)
        same = False
    if not same and _holds_inexact(value) and (problem := inexact(value)) is not None:
        raise SerializationError(f"{what} cannot be stored as JSON: {problem}")


def loads(data: bytes | str | None) -> Any:
    if data is None:
        return None
    return orjson.loads(data)


def _contents(item: Any) -> Any:
    """What orjson writes inside ``item`` (values of an object, items of an array), or None for a
    value it writes as a scalar or refuses."""
    if isinstance(item, dict):
        return item.values()
    if isinstance(item, list | tuple):
        return item
    if dataclasses.is_dataclass(item) and not isinstance(item, type):
        return [getattr(item, f.name) for f in dataclasses.fields(item)]
    if isinstance(item, enum.Enum):
        return (item.value,)
    if type(item).__module__ == "numpy" and hasattr(item, "tolist"):
        return (item.tolist(),)
    return None


def _holds_inexact(value: Any) -> bool:
    """Whether :func:`inexact` would find something: the same walk, without building paths."""
    stack = [value]
    seen: set[int] = set()  # containers already looked at: shared or circular references
    while stack:
        item = stack.pop()
        kind = type(item)
        if kind is str or item is None or kind is bool:
            continue
        if kind is float or isinstance(item, float):
            if not math.isfinite(item):
                return True
        elif kind is int or isinstance(item, int):
            if not INT_MIN <= item <= INT_MAX:
                return True
        elif id(item) not in seen and (contents := _contents(item)) is not None:
            seen.add(id(item))
            stack.extend(contents)
    return False


def inexact(value: Any, root: str = "$") -> str | None:
    """The first number in ``value`` that JSON would not keep exactly (an integer outside
    ``INT_MIN..INT_MAX``, NaN, ±Infinity), described with its path (``$.items[2].price``); None
    when there is none. Looks inside what orjson writes as arrays and objects: dicts, lists,
    tuples, dataclasses, enums and numpy values."""
    stack: list[tuple[Any, str, int]] = [(value, root, 0)]
    seen: set[int] = set()
    while stack:
        item, path, level = stack.pop()
        if item is None or isinstance(item, str | bool):
            continue
        if isinstance(item, int):
            if not INT_MIN <= item <= INT_MAX:
                return describe_int(path, item)
            continue
        if isinstance(item, float):
            if not math.isfinite(item):
                return describe_float(path, item)
            continue
        if level >= _WALK_DEPTH or id(item) in seen:
            continue
        children: list[tuple[Any, str]]
        if isinstance(item, dict):
            children = [(v, path + key_path(k)) for k, v in item.items()]
        elif isinstance(item, list | tuple):
            children = [(v, f"{path}[{i}]") for i, v in enumerate(item)]
        elif dataclasses.is_dataclass(item) and not isinstance(item, type):
            children = [(getattr(item, f.name), path + key_path(f.name)) for f in dataclasses.fields(item)]
        elif (contents := _contents(item)) is not None:  # an enum's value, a numpy value as lists
            children = [(child, path) for child in contents]
        else:
            continue
        seen.add(id(item))
        stack.extend((child, where, level + 1) for child, where in reversed(children))
    return None


def key_path(key: Any) -> str:
    """One step of a path into an object: ``.name``, or ``["odd key"]``."""
    if isinstance(key, str) and key.isidentifier():
        return f".{key}"
    if isinstance(key, str):
        return f"[{orjson.dumps(key).decode()}]"
    return f"[{key!r}]"


def describe_int(path: str, value: int) -> str:
    bits = value.bit_length()
    shown = f"the integer {value}" if bits <= 256 else f"an integer of {bits} bits"
    return (
        f"{path}: {shown} does not fit in 64 bits (JSON integers are kept exactly from "
        "-2**63 to 2**64-1); pass it as a string"
    )


def describe_float(path: str, value: float) -> str:
    return f"{path}: {float(value)!r} is not a JSON number (NaN and Infinity cannot be stored)"


def depth(value: Any, limit: int = MAX_DEPTH) -> int:
    """Nesting depth of a JSON-like value, stopping early once past ``limit``."""
    stack: list[tuple[Any, int]] = [(value, 1)]
    deepest = 0
    while stack:
        item, level = stack.pop()
        if level > deepest:
            deepest = level
            if deepest > limit:
                return deepest
        if isinstance(item, dict):
            stack.extend((v, level + 1) for v in item.values())
        elif isinstance(item, list | tuple):
            stack.extend((v, level + 1) for v in item)
    return deepest


def encode_error(exc: BaseException) -> bytes:
    return dumps(
        {
            "type": f"{type(exc).__module__}.{type(exc).__qualname__}",
            "message": str(exc),
            "traceback": "".join(traceback.format_exception(exc))[-8000:],
        }
    )


def parse_duration(value: str | float | int | timedelta, *, what: str = "duration") -> float:
    """Seconds from ``30``, ``1.5``, ``"90s"``, ``"15m"``, ``"24h"``, ``"7d"``, ``"1h30m"`` or a timedelta."""
    if isinstance(value, timedelta):
        seconds = value.total_seconds()
    elif isinstance(value, bool):
        raise ValueError(f"{what} must be seconds or a string like '24h', not {value!r}")
    elif isinstance(value, int | float):
        seconds = float(value)
    elif isinstance(value, str):
        text = value.strip()
        if not text:
            raise ValueError(f"{what} is empty")
        parsed = _cached_seconds(text) if len(text) <= 32 else _text_seconds(text)
        if parsed is None:
            raise ValueError(f"{what} {text!r} is not like '90s', '15m', '24h' or '7d'")
        seconds = parsed
    else:
        raise ValueError(f"{what} must be seconds or a string like '24h', not {type(value).__name__}")
    if seconds != seconds or seconds < 0 or seconds == float("inf"):
        raise ValueError(f"{what} must be a finite number of seconds >= 0, not {value!r}")
    return seconds


_UNITS = {"ms": 0.001, "s": 1.0, "m": 60.0, "h": 3600.0, "d": 86400.0, "w": 604800.0}


def _text_seconds(text: str) -> float | None:
    """The seconds ``text`` (stripped, not empty) says, or None when it is no duration."""
    try:
        return float(text)
    except ValueError:
        pass
    total, number = 0.0, ""
    i = 0
    parsed_any = False
    while i < len(text):
        ch = text[i]
        if ch.isdigit() or ch == ".":
            number += ch
            i += 1
            continue
        unit = "ms" if text.startswith("ms", i) else ch
        if unit not in _UNITS or not number:
            return None
        try:
            total += float(number) * _UNITS[unit]
        except ValueError:
            return None
        number = ""
        parsed_any = True
        i += len(unit)
    if number or not parsed_any:
        return None
    return total


#: :func:`_text_seconds` of the last few hundred short texts: a workflow names the same few
#: ("24h") at every wait it makes, and parsing one each time was a few % of a turn's work.
_cached_seconds = functools.lru_cache(maxsize=256)(_text_seconds)
