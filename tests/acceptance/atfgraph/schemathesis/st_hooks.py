"""Schemathesis hooks for the API contract run.

- Long polls are shortened so that a bounded run stays short. Only values the document allows
  (up to the route's declared maximum) are shortened, to 0.2 s, so no check is weakened: a
  claim, a submit-and-follow or a followed traverser answers after at most 0.2 s instead of up
  to 60 s, and a value above the maximum (a negative case, refused at once) is sent as it is.
- A list's ``after`` is an opaque cursor the server hands out (``next_cursor``): a made-up one
  that fits its pattern is not one (422 invalid_cursor), and no schema can say which strings
  are. Such a generated ``after`` is dropped (the first page is asked for); one that breaks the
  pattern is kept, so the refusal of malformed cursors is still checked. Paging itself is
  tested in test_atfg_paging.py."""

from __future__ import annotations

import re
from typing import Any

import schemathesis

from atfgraph.server import _paging, _routes

_CURSOR = re.compile("[A-Za-z0-9_-]+")

_MAX_WAIT = 0.2


def _short(value: Any, maximum: float) -> Any:
    """``value`` shortened to 0.2 s when it is a wait the route accepts; anything else as it is
    (a made-up invalid value turned valid here would make a negative case a positive one)."""
    if isinstance(value, int | float) and not isinstance(value, bool) and _MAX_WAIT < value <= maximum:
        return _MAX_WAIT
    return value


def _limit(context: Any) -> float:
    """The longest wait the operation being generated for declares."""
    path = str(getattr(getattr(context, "operation", None), "path", ""))
    return _routes._MAX_CLAIM_WAIT if path.endswith("/claim") else _routes.MAX_CLIENT_WAIT


@schemathesis.hook
def map_body(context: Any, body: Any) -> Any:
    if isinstance(body, dict) and "wait_seconds" in body:
        body["wait_seconds"] = _short(body["wait_seconds"], _limit(context))
    return body


@schemathesis.hook
def map_query(context: Any, query: Any) -> Any:
    if isinstance(query, dict) and "timeout" in query:
        query["timeout"] = _short(query["timeout"], _routes.MAX_CLIENT_WAIT)
    after = query.get("after") if isinstance(query, dict) else None
    if isinstance(after, str) and _CURSOR.fullmatch(after) and not _handed_out(after):
        del query["after"]
    return query


def _handed_out(cursor: str) -> bool:
    """Whether ``cursor`` decodes as a cursor of some list."""
    try:
        value = _paging.base64.urlsafe_b64decode(cursor + "=" * (-len(cursor) % 4))
        decoded = _paging.orjson.loads(value)
    except Exception:
        return False
    return isinstance(decoded, list) and bool(decoded) and isinstance(decoded[0], str)
