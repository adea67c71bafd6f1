"""The pages each of the SQLite store's transitions writes, one transition a commit.

    python -m bench.wal_frames [--n 3000] [--warm 1000]

One at a time every transition of a HITL run is a commit of its own, and each page a commit
changes is a WAL frame: written (two ``pwrite64``, header and page), checksummed (about 4,600
instructions a frame) and synced. This drives ``n`` runs through the store directly, each a run's
creation (leased), a checkpoint's save, a wait's creation with the suspension, the end of the
turn, the decision with its claim, the step's result and the run's end, every one awaited alone,
and counts the frames each commit added to the WAL (automatic checkpoints off, so the WAL only
grows). Reported per transition: the mean frames a commit over the runs after the first ``warm``
(the tables' first pages split early on), and their median.
"""

from __future__ import annotations

import argparse
import asyncio
import json
import os
import statistics
import tempfile
from collections.abc import Awaitable
from pathlib import Path
from typing import Any, TypeVar

from pyworkflow.store import SQLiteStore
from pyworkflow.store._protocol import Fence, NewWait, WaitKind

#: A WAL frame: its 24-byte header and one page (the store's files keep SQLite's 4,096 bytes).
FRAME = 24 + 4096
T = TypeVar("T")


async def _end_of_turn(store: SQLiteStore, fence: Fence, wait_id: str, now: float) -> None:
    """The end of a suspended turn as the runtime writes it (deferred: it joins the next commit),
    committed by an empty write of its own."""
    await store.suspend_run(fence, notified=[wait_id], delivered={}, now=now, recorded=True)
    await store.db.write(lambda conn: None)


async def measure(n: int, warm: int, directory: Path) -> dict[str, dict[str, float]]:
    path = directory / "frames.db"
    wal = Path(f"{path}-wal")
    store = SQLiteStore(str(path))
    counts: dict[str, list[float]] = {}

    async def counted(name: str, write: Awaitable[T]) -> T:
        before = wal.stat().st_size
        value = await write
        counts.setdefault(name, []).append((wal.stat().st_size - before) / FRAME)
        return value

    try:
        store.db.write_sync(lambda c: c.execute("PRAGMA wal_autocheckpoint = 0"))
        for i in range(n):
            now = 1_000_000.0 + i
            run = f"r{i:08d}"
            claim = await counted(
                "a run's creation",
                store.create_run(run, "wf", b'{"args":[]}', now=now, lease_owner="w", lease_ttl=30),
            )
            assert claim is not None
            fence = claim.fence
            await counted(
                "a checkpoint's save",
                store.save_checkpoint(fence, "s#1", "", b"c" * 200, expected_revision=0, now=now),
            )
            token = os.urandom(32)
            key = "s#1/step_hook:approve#1"
            wait = NewWait(f"w{i:08d}", key, WaitKind.STEP_HOOK, "approve", "s#1", token, None, None)
            await counted(
                "a wait's creation, suspending", store.create_wait(fence, wait, now=now, suspend=True)
            )
            await counted("the end of the turn", _end_of_turn(store, fence, wait.id, now))
            _, resumed = await counted(
                "a decision with its claim",
                store.resolve_wait_and_claim(token_digest=token, payload=b"1", now=now, check=None, owner="w",
                                             lease_ttl=30, max_crashes=3),
            )  # fmt: skip
            assert resumed is not None
            await counted("a step's result", store.complete_step(resumed.fence, "s#1", b"1", now=now))
            await counted("a run's end", store.complete_run(resumed.fence, b"1", now=now))
    finally:
        store.close()
    return {
        name: {
            "mean": round(statistics.fmean(values[warm:]), 2),
            "median": statistics.median(values[warm:]),
        }
        for name, values in counts.items()
    }


def main(argv: list[str] | None = None) -> int:
    parser = argparse.ArgumentParser(prog="python -m bench.wal_frames", description=__doc__.split("\n")[0])
    parser.add_argument("--n", type=int, default=3000, help="runs (default 3000)")
    parser.add_argument("--warm", type=int, default=1000, help="first runs not counted (default 1000)")
    parser.add_argument("--out", type=Path, help="also write the figures to this JSON file")
    args = parser.parse_args(argv)
    if args.warm < 0 or args.n <= args.warm:
        parser.error("--n must be more than --warm, and --warm at least 0")
    with tempfile.TemporaryDirectory(prefix="pyworkflow-frames-") as directory:
        figures = asyncio.run(measure(args.n, args.warm, Path(directory)))
    print(f"WAL frames a commit, one transition a commit, runs {args.warm + 1}-{args.n}:")
    for name, figure in figures.items():
        print(f"  {name:32s} mean {figure['mean']:5.2f}  median {figure['median']:g}")
    if args.out is not None:
        result: dict[str, Any] = {"n": args.n, "warm": args.warm, "frames": figures}
        args.out.write_text(json.dumps(result, indent=2) + "\n")
    return 0


if __name__ == "__main__":
    raise SystemExit(main())
