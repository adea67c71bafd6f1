"""Processes that do one thing at the same moment: each is started, imports what it needs, then
spins until a shared start time (argv[-1]) so that their work really overlaps."""

from __future__ import annotations

import subprocess
import sys
import time


def run_at_once(code: str, *args: str, count: int = 4, lead: float = 1.5) -> list[tuple[int, str, str]]:
    """Run ``count`` copies of ``python -c code *args START``; each reads START (a time.time()
    value) as its last argument and waits for it. Returns (returncode, stdout, stderr) of each."""
    start = time.time() + lead
    procs = [
        subprocess.Popen(
            [sys.executable, "-c", code, *args, str(start)],
            stdout=subprocess.PIPE,
            stderr=subprocess.PIPE,
            text=True,
        )
        for _ in range(count)
    ]
    outputs = [p.communicate(timeout=60) for p in procs]
    return [(p.returncode, out, err) for p, (out, err) in zip(procs, outputs, strict=True)]
