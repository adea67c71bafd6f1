"""What the machine is, so that figures taken on two machines can be told apart.

The same code ran 2.3x slower per approval cycle on one machine of this workplace than on the
one before it (server CPU per cycle 3.6-4.5 ms against 1.6), with the same core count and
nothing else running. ``describe`` puts the processor's model and a fixed piece of
single-threaded Python work (JSON in and out and a dict built per item, the engine's everyday
kind of work) next to a benchmark's figures: a figure divided by ``python_probe_ms`` compares
across machines far better than the figure alone. The probe is the median of several rounds, so
a busy moment moves it less than it moves the benchmark.
"""

from __future__ import annotations

import json
import os
import statistics
import time
from pathlib import Path
from typing import Any

#: items per round of the probe, and rounds (the median is reported)
PROBE_ITEMS = 20_000
PROBE_ROUNDS = 7


def _cpu_model() -> str:
    try:
        for line in Path("/proc/cpuinfo").read_text().splitlines():
            if line.startswith("model name"):
                return line.split(":", 1)[1].strip()
    except OSError:
        pass
    return "unknown"


def python_probe_ms(items: int = PROBE_ITEMS, rounds: int = PROBE_ROUNDS) -> float:
    """Median milliseconds of one round: ``items`` times, a small record built, dumped to JSON
    and read back (no I/O, one thread)."""
    times = []
    for _ in range(rounds):
        started = time.perf_counter()
        for i in range(items):
            record = {"id": f"run-{i}", "status": "waiting", "attempt": i % 3, "input": {"ticket": "T-1"}}
            back = json.loads(json.dumps(record))
            if back["attempt"] != i % 3:  # keeps the work from being skipped; never true
                raise AssertionError("the probe's JSON round trip lost a field")
        times.append(time.perf_counter() - started)
    return round(statistics.median(times) * 1000, 1)


def describe() -> dict[str, Any]:
    """The processor, its cores, the load when asked, and the Python probe's time."""
    return {
        "cpu_model": _cpu_model(),
        "cpus": os.cpu_count(),
        "loadavg": [round(x, 2) for x in os.getloadavg()],
        "python_probe_ms": python_probe_ms(),
        "python_probe": f"{PROBE_ITEMS:,} small records through json.dumps and json.loads, "
        f"median of {PROBE_ROUNDS} rounds",
    }


__all__ = ["describe", "python_probe_ms"]
