"""Timestamps in the API's JSON, one rule for every answer.

Every instant is a number of Unix seconds (UTC, fractions kept): ``created_at``, ``expires_at``,
``at``, ``last_seen`` and the rest, as the API always answered (clients, the CLI and the
console sort and compute with them, and the spec's examples read them so). Alongside each, the
same instant in ISO 8601 UTC with microseconds and a ``Z``, under the name with ``_iso`` added
(``created_at_iso: "2026-12-01T15:14:29.028175Z"``), null when the instant is. Query parameters
that take a time (``created_after``, ``since``, ...) take Unix seconds."""

from __future__ import annotations

from datetime import UTC, datetime
from typing import Any

#: Instants already written out (a traverser's ``created_at`` is stamped on every read of it);
#: started over when full. Measured with py-spy on the graph server under
#: ``bench.atfgraph_cycles``: ``strftime`` alone was 8.5 % of the time it held the GIL.
_WRITTEN: dict[float, str] = {}
_WRITTEN_MAX = 8192


def iso(seconds: float | None) -> str | None:
    """``seconds`` (Unix, UTC) in ISO 8601 UTC: ``2026-12-01T15:14:29.028175Z``."""
    if seconds is None:
        return None
    text = _WRITTEN.get(seconds)
    if text is None:
        if len(_WRITTEN) >= _WRITTEN_MAX:
            _WRITTEN.clear()
        # isoformat of an aware UTC instant ends "+00:00"; the API writes "Z" (half strftime's cost)
        text = datetime.fromtimestamp(seconds, UTC).isoformat(timespec="microseconds")[:-6] + "Z"
        _WRITTEN[seconds] = text
    return text


def stamped(view: dict[str, Any], *names: str) -> dict[str, Any]:
    """``view`` with ``<name>_iso`` beside each of the instants ``names``."""
    for name in names:
        view[name + "_iso"] = iso(view[name])
    return view


__all__ = ["iso", "stamped"]
