"""Schemathesis hooks for the API contract run: long polls are shortened so that a bounded run
stays short. The values stay within what the document allows (0 to the declared maximum), so
no check is weakened: a claim, a submit-and-follow or a followed traverser answers after at most
0.2 s instead of up to 60 s."""

from __future__ import annotations

from typing import Any

import schemathesis

_MAX_WAIT = 0.2


def _short(value: Any) -> Any:
    if isinstance(value, int | float) and not isinstance(value, bool) and value > _MAX_WAIT:
        return _MAX_WAIT
    return value


@schemathesis.hook
def map_body(context: Any, body: Any) -> Any:
    if isinstance(body, dict) and "wait_seconds" in body:
        body["wait_seconds"] = _short(body["wait_seconds"])
    return body


@schemathesis.hook
def map_query(context: Any, query: Any) -> Any:
    if isinstance(query, dict) and "timeout" in query:
        query["timeout"] = _short(query["timeout"])
    return query
