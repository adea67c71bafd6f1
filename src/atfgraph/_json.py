"""JSON in and out: orjson everywhere, and the limits the server enforces on what it accepts."""

from __future__ import annotations

from typing import Any

import orjson

#: Largest request body the server reads (bytes).
MAX_BODY_BYTES = 1024 * 1024
#: Deepest nesting of arrays and objects accepted in a request body.
MAX_DEPTH = 64


class JSONTooDeepError(ValueError):
    """The document nests arrays/objects deeper than allowed."""


def dumps(value: Any) -> bytes:
    return orjson.dumps(value)


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
