"""Instructions per run, counted by valgrind's callgrind: the engine's CPU work as a figure the
machine's load does not move.

On a shared two-core machine a change that saves 3 % of a run's CPU is lost in the noise of any
wall-clock rate (``bench.hitl`` all at once moved by 10 % between runs of the same code). The
instructions the process executes do not depend on how busy the machine is: the same code and
workload give the same count within a fraction of a percent. So a small change is measured here as
instructions per run before and after, and ``bench.hitl`` keeps the rates.

``python -m bench.instructions [--n 300] [--mode all_at_once|one_at_a_time|both] [--out F]
[--without events|fence-reads|metrics]``: ``--without`` leaves that part of the engine out of the
child (an accounting experiment; the engine is not correct without it), to show what it costs.

The parent runs this module again under ``valgrind --tool=callgrind`` (the child). The child runs
``bench.hitl``'s workload on a fresh SQLite file (phase A: N HITL runs started and suspended on
their step hook; B: the N resumed and completed; C: N plain three-step runs) and asks callgrind to
write its counters at each phase's end (``callgrind_control --dump``): the instructions of every
thread of the process in that phase, divided by N. A phase ends when its N runs reached their
status and the runtime's turns ended: the harness awaits the turns' own tasks (no polling, whose
count would grow with the time a phase takes), and reads the database to confirm the phase only
after its counters were written.

What the count includes beside the runs' own work: the runtime's periodic work during the phase
(its poll is set to 5 s here, as the local runtime claims the runs it starts and resumes itself;
its heartbeat), a pause of 0.1 s at each phase's end (a deferred end of turn commits within
0.01 s) and the ``callgrind_control`` call. Under valgrind the process runs some 50 times slower,
so what runs by the clock counts a little more than it would.
"""

from __future__ import annotations

import argparse
import asyncio
import json
import os
import re
import shutil
import sqlite3
import subprocess
import sys
import tempfile
import time
from collections.abc import Awaitable, Callable, Sequence
from pathlib import Path
from typing import Any

PHASES = {"A": "start+suspend", "B": "resume+complete", "C": "plain (3 steps)"}
MODES = ("all_at_once", "one_at_a_time")
#: The child's runtime poll (seconds): it claims the runs it starts and resumes itself.
POLL_INTERVAL = 5.0
#: The name of a local runtime's turn task begins with this (``LocalRuntime._spawn``).
TURN_TASK = "pyworkflow-turn:"
#: What ``--without`` can leave out, to see what it costs (an accounting experiment: the engine is
#: not correct without it, and nothing here is how it runs).
PARTS = {
    "events": "the history's rows the store appends from Python (the store's event appends do"
    " nothing; the transitions written as one statement, _sqlite_statements.py, still append theirs)",
    "fence-reads": "the fence's read before a turn's write, where Python reads it (every fence taken"
    " as held; the transitions written as one statement still check theirs)",
    "metrics": "the metrics' observations (histograms, counters and gauges do nothing)",
}


def _leave_out(parts: Sequence[str]) -> None:
    """Replace each of ``parts`` by nothing in this process (``--without``)."""
    if "events" in parts:
        from pyworkflow.store import _sqlite

        _sqlite._event = lambda *args, **kwargs: None
    if "fence-reads" in parts:
        from pyworkflow.store import _sqlite

        _sqlite._holds = lambda conn, fence: True
    if "metrics" in parts:
        from prometheus_client import Counter, Gauge, Histogram

        Histogram.observe = lambda self, amount, exemplar=None: None  # type: ignore[method-assign]
        Counter.inc = lambda self, amount=1, exemplar=None: None  # type: ignore[method-assign]
        Gauge.inc = lambda self, amount=1: None  # type: ignore[method-assign]
        Gauge.dec = lambda self, amount=1: None  # type: ignore[method-assign]
        from pyworkflow.store import _histograms, metrics

        metrics.WriterBatches.observe = lambda self, seconds, jobs: None  # type: ignore[method-assign]
        _histograms._Child.observe = lambda self, amount: None  # type: ignore[method-assign]


# -- the child, under valgrind --------------------------------------------------------------------


def _dump(tag: str) -> None:
    """Write callgrind's counters since the last dump (a file of their own) and zero them."""
    subprocess.run(["callgrind_control", f"--dump={tag}", str(os.getpid())], check=True, capture_output=True)


async def _turns_ended(*, settle: bool = True) -> None:
    """Until no turn of the runtime is in flight: awaits the turns' own tasks (no polling, so
    the harness counts the same whatever the pace); ``settle``: then lets a deferred end of turn
    commit (at a phase's end; one at a time it joins the next run's first commit, as in
    ``bench.hitl``)."""
    while turns := [t for t in asyncio.all_tasks() if t.get_name().startswith(TURN_TASK)]:
        await asyncio.wait(turns)
    if settle:
        await asyncio.sleep(0.1)  # a deferred end of turn commits within DEFER_LINGER (0.01 s)


async def _drive(one: bool, n: int, call: Callable[[int], Awaitable[Any]]) -> None:
    """``call(i)`` for i in 0..n-1, all at once or one at a time (each run's turns ended before
    the next call), then until the phase's last turn ended and its deferred writes committed."""
    if one:
        for i in range(n):
            await call(i)
            await _turns_ended(settle=False)
    else:
        await asyncio.gather(*(call(i) for i in range(n)))
    await _turns_ended()


def _count(path: Path, workflow: str, status: str) -> int:
    conn = sqlite3.connect(path)
    try:
        row = conn.execute(
            "SELECT count(*) FROM runs WHERE workflow = ? AND status = ?", (workflow, status)
        ).fetchone()
        return int(row[0])
    finally:
        conn.close()


async def _child(n: int, mode: str, directory: Path, without: Sequence[str]) -> None:
    _leave_out(without)
    import pyworkflow
    from bench.hitl import COUNTERS, HITL, PLAIN, hitl, payload_for, plain

    path = directory / "instructions.db"
    pyworkflow.configure(storage=f"sqlite:///{path}", poll_interval=POLL_INTERVAL)
    warm = await pyworkflow.start(plain, -1)  # starts the runtime, its loops and the writer
    await pyworkflow.wait_for_run(warm, 600)
    await _turns_ended()
    one = mode == "one_at_a_time"

    _dump("setup")
    await _drive(one, n, lambda i: pyworkflow.start(hitl, i))
    _dump("A")
    if _count(path, HITL, "suspended") != n or len(COUNTERS.tokens) != n:
        raise RuntimeError(f"phase A: {_count(path, HITL, 'suspended')} runs suspended, expected {n}")
    await _drive(one, n, lambda i: pyworkflow.resume_hook(COUNTERS.tokens[i], payload_for(i)))
    _dump("B")
    if _count(path, HITL, "completed") != n:
        raise RuntimeError(f"phase B: {_count(path, HITL, 'completed')} runs completed, expected {n}")
    await _drive(one, n, lambda i: pyworkflow.start(plain, i))
    _dump("C")
    if _count(path, PLAIN, "completed") != n + 1:
        raise RuntimeError(
            f"phase C: {_count(path, PLAIN, 'completed')} plain runs completed, expected {n + 1}"
        )
    await pyworkflow.shutdown()


# -- the parent ------------------------------------------------------------------------------------


def _missing_tools() -> list[str]:
    return [tool for tool in ("valgrind", "callgrind_control") if shutil.which(tool) is None]


def read_dumps(directory: Path) -> dict[str, int]:
    """Instructions by dump tag, from callgrind's output files in ``directory``."""
    counts: dict[str, int] = {}
    for dump in directory.glob("callgrind.out*"):
        text = dump.read_text(errors="replace")
        tag = re.search(r"^desc: Trigger: dump (\S+)", text, re.M)
        total = re.search(r"^(?:summary|totals): (\d+)", text, re.M)
        if tag and total:
            counts[tag.group(1)] = int(total.group(1))
    return counts


def measure(n: int, mode: str, without: Sequence[str] = ()) -> dict[str, Any]:
    """Run the child for ``mode`` under callgrind (``without``: parts left out, see
    :data:`PARTS`); its instructions per run by phase."""
    with tempfile.TemporaryDirectory(prefix="pyworkflow-instructions-") as tmp:
        directory = Path(tmp)
        cmd = [
            "valgrind", "--tool=callgrind", f"--callgrind-out-file={directory / 'callgrind.out'}",
            sys.executable, "-m", "bench.instructions", "--child", "--n", str(n), "--mode", mode,
            "--dir", str(directory), *(f"--without={part}" for part in without),
        ]  # fmt: skip
        started = time.monotonic()
        proc = subprocess.run(cmd, capture_output=True, text=True, timeout=3600)
        seconds = time.monotonic() - started
        if proc.returncode != 0:
            raise RuntimeError(f"the child under valgrind failed ({proc.returncode}):\n{proc.stderr[-3000:]}")
        counts = read_dumps(directory)
    missing = [p for p in PHASES if p not in counts]
    if missing:
        raise RuntimeError(f"callgrind wrote no counters for phase(s) {', '.join(missing)}")
    return {
        "instructions_per_run": {p: round(counts[p] / n) for p in PHASES},
        "instructions": {p: counts[p] for p in PHASES},
        "setup_instructions": counts.get("setup"),
        "seconds_under_valgrind": round(seconds, 1),
    }


def main(argv: list[str] | None = None) -> int:
    parser = argparse.ArgumentParser(
        description="instructions per run of bench.hitl's workload, counted by valgrind's callgrind"
    )
    parser.add_argument("--n", type=int, default=300, help="runs per phase (default 300)")
    parser.add_argument("--mode", choices=(*MODES, "both"), default="both")
    parser.add_argument("--out", type=Path, help="JSON output file")
    parser.add_argument(
        "--without",
        action="append",
        choices=sorted(PARTS),
        default=[],
        help="leave this part out, to see what it costs (may be given more than once; the engine "
        "is not correct without it)",
    )
    parser.add_argument("--child", action="store_true", help=argparse.SUPPRESS)
    parser.add_argument("--dir", type=Path, help=argparse.SUPPRESS)
    args = parser.parse_args(argv)
    if args.n < 1:
        parser.error("--n must be at least 1")
    if args.child:
        if args.mode not in MODES or args.dir is None:
            parser.error("--child needs one --mode and --dir")
        asyncio.run(_child(args.n, args.mode, args.dir, args.without))
        return 0
    missing = _missing_tools()
    if missing:
        print(
            f"bench.instructions: {' and '.join(missing)} not found (apt-get install -y valgrind)",
            file=sys.stderr,
        )
        return 2
    modes = MODES if args.mode == "both" else (args.mode,)
    python = sys.version.split()[0]
    print(
        f"instructions per run (valgrind --tool=callgrind, every thread), N={args.n}, SQLite, Python {python}"
    )
    for part in args.without:
        print(f"  without {part}: {PARTS[part]} (an accounting experiment, not how the engine runs)")
    config = {"n": args.n, "poll_interval": POLL_INTERVAL, "without": args.without}
    results: dict[str, Any] = {"config": config, "modes": {}}
    for mode in modes:
        m = measure(args.n, mode, args.without)
        results["modes"][mode] = m
        print(f"  {mode.replace('_', ' ')} ({m['seconds_under_valgrind']} s under valgrind):")
        for phase, name in PHASES.items():
            print(f"    phase {phase} {name:<18} {m['instructions_per_run'][phase]:>12,} instructions/run")
    if args.out is not None:
        args.out.write_text(json.dumps(results, indent=2) + "\n")
        print(f"results: {args.out}")
    return 0


if __name__ == "__main__":
    raise SystemExit(main())
