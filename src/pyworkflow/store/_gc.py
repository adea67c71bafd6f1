"""The garbage collector's pace while a process serves runs.

CPython walks its youngest generation every 700 net allocations of container objects (its
default threshold), and every tenth walk the next generation too. A process with thousands of
runs in flight holds tens of thousands of live frames, futures, dicts and rows: each young walk
visits them, promotes them, and the older walks visit them again, while almost none of it is
garbage (reference counting frees the engine's objects; a phase of 4,000 runs in ``bench.hitl``
left some 1,200 objects in cycles). All at once, that was 15-20 % of the engine's CPU.

So while a runtime, a sweeper or a graph server serves runs, the young generation's threshold is
raised to :data:`YOUNG_GC_THRESHOLD` (the older generations' multipliers are left as they are),
and it goes back when the last of them stops. The collector still runs, less often: cyclic
garbage waits for up to that many allocations (a few MB at most) before it is freed. A process
that chose its own pace keeps it: the threshold is only ever raised, never with the collector
disabled, and a threshold someone else set meanwhile is theirs (it is not put back).
"""

from __future__ import annotations

import gc
import threading
from collections.abc import Callable

from .._errors import ConfigurationError

__all__ = ["YOUNG_GC_THRESHOLD", "check_gc_threshold", "gc_threshold_from_text", "hold_gc_pace"]

#: The youngest generation's threshold while runs are served (CPython's default is 700).
YOUNG_GC_THRESHOLD = 50_000

#: The largest threshold taken (CPython keeps it in a C int).
_MOST = 2**31 - 1

_lock = threading.Lock()
_holders: dict[object, int] = {}
_before: tuple[int, ...] | None = None  # the thresholds before this module raised them
_ours: tuple[int, ...] | None = None  # the thresholds this module set, while they are set


def check_gc_threshold(value: object, what: str = "gc_threshold") -> int | None:
    """``value`` if it is a young-generation threshold (an int from 1 to 2**31-1) or None (leave
    the collector alone); else :class:`ConfigurationError`."""
    if value is None:
        return None
    if isinstance(value, bool) or not isinstance(value, int) or not 1 <= value <= _MOST:
        raise ConfigurationError(
            f"{what} must be an int from 1 to {_MOST} (the garbage collector's young-generation "
            f"threshold while runs are served) or None (leave the collector alone), not {value!r}"
        )
    return value


def gc_threshold_from_text(raw: str, what: str = "gc_threshold") -> int | None:
    """A threshold as an environment variable or a command line gives it: decimal digits (see
    :func:`check_gc_threshold`) or ``none`` (any case: leave the collector alone); else
    :class:`ConfigurationError` naming ``what``."""
    text = raw.strip()
    if text.lower() == "none":
        return None
    return check_gc_threshold(int(text) if text.isdecimal() else raw, what)


def hold_gc_pace(young: int | None = YOUNG_GC_THRESHOLD) -> Callable[[], None]:
    """Raise the young generation's threshold to ``young`` (None: change nothing) until the
    returned function is called (once is enough; later calls do nothing). Holders may overlap:
    the highest threshold held applies, and the process's own comes back after the last."""
    young = check_gc_threshold(young, "young")
    if young is None:
        return _nothing
    token = object()
    with _lock:
        _holders[token] = young
        _apply()

    def release() -> None:
        with _lock:
            if _holders.pop(token, None) is not None:
                _apply()

    return release


def _nothing() -> None:
    return None


def _apply() -> None:
    """Set the thresholds the holders want (called with the lock held)."""
    global _before, _ours
    now = gc.get_threshold()
    if _ours is not None and now != _ours:  # set by someone else meanwhile: theirs, kept
        _before = _ours = None
        return
    base = now if _before is None else _before
    want = max(_holders.values(), default=None)
    if want is None or not gc.isenabled() or base[0] >= want:
        if _before is not None:
            gc.set_threshold(*_before)
        _before = _ours = None
        return
    _before, _ours = base, (want, *base[1:])
    gc.set_threshold(*_ours)
