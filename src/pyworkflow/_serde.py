"""JSON in and out of the store: values are serialized once, kept as bytes until read."""

from __future__ import annotations

import traceback
from datetime import timedelta
from typing import Any

import orjson

from ._errors import SerializationError

#: Deepest nesting accepted in a stored value (orjson itself refuses deeper than 254).
MAX_DEPTH = 64


def dumps(value: Any, *, what: str = "value") -> bytes:
    try:
        return orjson.dumps(value, option=orjson.OPT_SERIALIZE_NUMPY)
    except (TypeError, orjson.JSONEncodeError) as exc:
        raise SerializationError(f"{what} is not JSON-serializable: {exc}") from None


def loads(data: bytes | str | None) -> Any:
    if data is None:
        return None
    return orjson.loads(data)


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
        seconds = _parse_duration_text(value.strip(), what)
    else:
        raise ValueError(f"{what} must be seconds or a string like '24h', not {type(value).__name__}")
    if seconds != seconds or seconds < 0 or seconds == float("inf"):
        raise ValueError(f"{what} must be a finite number of seconds >= 0, not {value!r}")
    return seconds


_UNITS = {"ms": 0.001, "s": 1.0, "m": 60.0, "h": 3600.0, "d": 86400.0, "w": 604800.0}


def _parse_duration_text(text: str, what: str) -> float:
    if not text:
        raise ValueError(f"{what} is empty")
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
            raise ValueError(f"{what} {text!r} is not like '90s', '15m', '24h' or '7d'")
        try:
            total += float(number) * _UNITS[unit]
        except ValueError:
            raise ValueError(f"{what} {text!r} is not like '90s', '15m', '24h' or '7d'") from None
        number = ""
        parsed_any = True
        i += len(unit)
    if number or not parsed_any:
        raise ValueError(f"{what} {text!r} is not like '90s', '15m', '24h' or '7d'")
    return total
