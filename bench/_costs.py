"""What a benchmark's own process spends, counted rather than timed where it can be: CPU by
thread (the event loop's, the store's writers') and the garbage collector's passes; and the
``--gc-threshold`` argument that sets the runtime's pace (docs/operations.md, "The garbage
collector's pace")."""

from __future__ import annotations

import argparse
import gc
import os
import threading
import time
from pathlib import Path

from pyworkflow import ConfigurationError
from pyworkflow.store import gc_threshold_from_text

#: The store's writer threads, by name: SQLite's one, PostgreSQL's two.
WRITER_THREADS = ("sqlite-writer", "pyworkflow-postgres-writer")


def writer_cpu_seconds() -> float:
    """CPU time of the store's writer threads, from /proc (0 where that is not available)."""
    total = 0.0
    for t in threading.enumerate():
        if t.name.startswith(WRITER_THREADS) and t.native_id is not None:
            try:
                fields = Path(f"/proc/self/task/{t.native_id}/stat").read_text().rsplit(")", 1)[1].split()
            except OSError:  # the thread ended meanwhile
                continue
            total += (int(fields[11]) + int(fields[12])) / os.sysconf("SC_CLK_TCK")
    return total


def gc_collections_now() -> list[int]:
    return [generation["collections"] for generation in gc.get_stats()]


def cpu_now() -> dict[str, float]:
    return {"process": time.process_time(), "main": time.thread_time(), "writer": writer_cpu_seconds()}


def gc_threshold(raw: str) -> int | None:
    """``--gc-threshold``: an int, or ``none`` (the runtime leaves the collector alone)."""
    try:
        return gc_threshold_from_text(raw, "--gc-threshold")
    except ConfigurationError as exc:
        raise argparse.ArgumentTypeError(str(exc)) from None
