"""The engine's wall clock. Every time the engine stores or compares (a run's timestamps, a
hook's or timer's deadline, a lease's expiry, the moment a due wait is acted on) comes from
:func:`now`; durations measured inside one process use ``time.monotonic`` and are not its
business. The stateful property test (tests/reliability) installs a clock it moves forward and
back with :func:`set_clock`."""

from __future__ import annotations

import time
from collections.abc import Callable

_source: Callable[[], float] | None = None


def now() -> float:
    """Seconds since the epoch, as the engine sees them."""
    # time.time looked up at each call: a test that replaces it moves this clock too
    return time.time() if _source is None else _source()


def set_clock(source: Callable[[], float] | None) -> None:
    """Read the time from ``source`` from now on (``None``: the system's clock again)."""
    global _source
    _source = source


__all__ = ["now", "set_clock"]
