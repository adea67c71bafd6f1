"""Timestamps in the API's JSON, one rule for every answer.

Every instant is a number of Unix seconds (UTC, fractions kept): ``created_at``, ``expires_at``,
``at``, ``last_seen`` and the rest, as the API always answered (clients, the CLI and the
console sort and compute with them, and the spec's examples read them so). Alongside each, the
same instant in ISO 8601 UTC with microseconds and a ``Z``, under the name with ``_iso`` added
(``created_at_iso: "2026-12-01T15:14:29.028175Z"``), null when the instant is. Query parameters
that take a time (``created_after``, ``since``, ...) take Unix seconds."""

from __future__ import annotations

import math
from datetime import UTC, datetime
from typing import Any

#: Instants already written out (a traverser's ``created_at`` is stamped on every read of it);
#: started over when full. Measured with py-spy on the graph server under
#: ``bench.atfgraph_cycles``: ``strftime`` alone was 8.5 % of the time it held the GIL.
_WRITTEN: dict[float, str] = {}
_WRITTEN_MAX = 8192
#: Each whole second's text up to its fraction (``2026-12-01T15:14:29.``): most instants the
#: server writes fall in a few recent seconds, and the fraction is all that differs. Formatting
#: the second anew each time was still 6.4 % of the GIL under ``bench.atfgraph_cycles``.
_SECONDS: dict[float, str] = {}
_SECONDS_MAX = 4096
_modf = math.modf


def iso(seconds: float | None) -> str | None:
    """``seconds`` (Unix, UTC) in ISO 8601 UTC: ``2026-12-01T15:14:29.028175Z``."""
    if seconds is None:
        return None
    text = _WRITTEN.get(seconds)
    if text is None:
        if len(_WRITTEN) >= _WRITTEN_MAX:
            _WRITTEN.clear()
        # datetime.fromtimestamp's own split and rounding (the fraction's microseconds, half to
        # even, carried into the second), so that the text is the same as its strftime's.
        fraction, whole = _modf(seconds)
        micros = round(fraction * 1e6)
        if micros >= 1_000_000:
            whole += 1.0
            micros -= 1_000_000
        elif micros < 0:
            whole -= 1.0
            micros += 1_000_000
        prefix = _SECONDS.get(whole)
        if prefix is None:
            if len(_SECONDS) >= _SECONDS_MAX:
                _SECONDS.clear()
            prefix = datetime.fromtimestamp(whole, UTC).strftime("%Y-%m-%dT%H:%M:%S.")
            _SECONDS[whole] = prefix
        text = f"{prefix}{micros:06d}Z"
        _WRITTEN[seconds] = text
    return text


def stamped(view: dict[str, Any], *names: str) -> dict[str, Any]:
    """``view`` with ``<name>_iso`` beside each of the instants ``names``."""
    for name in names:
        view[name + "_iso"] = iso(view[name])
    return view


__all__ = ["iso", "stamped"]
