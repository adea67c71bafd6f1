"""Cursor pagination of the API's lists, written once for every list route.

A list answers ``{"items": [...], "next_cursor": ...}``: at most ``limit`` items (1 to
:data:`MAX_LIMIT`) in the list's order, and the opaque cursor of the next page, or null on the last
one, so nothing is ever cut off silently. A cursor is the sort key of the page's last item (its
time and id: keyset pagination, so a page is an index walk however deep it is, and rows written
meanwhile neither repeat nor go missing), tagged with the list it belongs to, in URL-safe base64.
A cursor of another list, or one that is not a cursor at all, is ``422 invalid_cursor``.

Stores read ``limit + 1`` rows after the cursor (:func:`keyset` gives the condition and order);
:func:`page` keeps ``limit`` of them and makes the next cursor from the last one kept."""

from __future__ import annotations

import base64
import binascii
from collections.abc import Sequence
from typing import Annotated, Any

import orjson
from fastapi import Query

from ._errors import ApiError

#: The most items one page holds.
MAX_LIMIT = 1000
#: The longest cursor the API hands out is far shorter (a time and an id).
MAX_CURSOR = 600
#: The ``limit`` and ``after`` query parameters of every list route.
Limit = Annotated[int, Query(ge=1, le=MAX_LIMIT, description=f"items per page, 1 to {MAX_LIMIT}")]
After = Annotated[
    str | None,
    Query(
        max_length=MAX_CURSOR,
        pattern="^[A-Za-z0-9_-]+$",
        description="the `next_cursor` of the previous page (opaque); absent: the first page",
    ),
]
#: A cursor's values: the sort key of the last item of a page.
Key = tuple[Any, ...]


def encode(kind: str, key: Key) -> str:
    return base64.urlsafe_b64encode(orjson.dumps([kind, *key])).rstrip(b"=").decode()


def decode(kind: str, raw: str | None, arity: int = 2) -> Key | None:
    """The sort key a cursor of list ``kind`` carries (None: the first page), or 422."""
    if raw is None:
        return None
    try:
        value = orjson.loads(base64.urlsafe_b64decode(raw + "=" * (-len(raw) % 4)))
    except (binascii.Error, ValueError, orjson.JSONDecodeError):
        value = None
    ok = isinstance(value, list) and len(value) == arity + 1 and value[0] == kind
    if not ok or not all(isinstance(v, str | int | float) and not isinstance(v, bool) for v in value[1:]):
        raise ApiError(422, "invalid_cursor", f"after: not a cursor of this list ({kind})")
    return tuple(value[1:])


def keyset(columns: Sequence[str], descending: bool, after: Key | None) -> tuple[str, list[Any], str]:
    """The condition (``AND ...``, with its parameters) that starts after ``after`` and the
    ORDER BY clause of a list sorted by ``columns`` (the last one unique: the id)."""
    direction = "DESC" if descending else "ASC"
    order = " ORDER BY " + ", ".join(f"{c} {direction}" for c in columns)
    if after is None:
        return "", [], order
    op = "<" if descending else ">"
    first, *rest = columns
    if not rest:
        return f" AND {first} {op} ?", [after[0]], order
    (second,) = rest
    return (
        f" AND ({first} {op} ? OR ({first} = ? AND {second} {op} ?))",
        [after[0], after[0], after[1]],
        order,
    )


def page(
    kind: str, items: list[dict[str, Any]], limit: int, fields: Sequence[str] = ("created_at", "id")
) -> dict[str, Any]:
    """The answer of a list route from up to ``limit + 1`` items read after its cursor."""
    more = len(items) > limit
    items = items[:limit]
    cursor = encode(kind, tuple(items[-1][f] for f in fields)) if more and items else None
    return {"items": items, "next_cursor": cursor}


__all__ = ["MAX_LIMIT", "After", "Key", "Limit", "decode", "encode", "keyset", "page"]
