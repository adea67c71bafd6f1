"""What the disk allows: the latency of a bare SQLite commit on the benchmark's own file system.

One run at a time, nothing can share a commit, so a phase cannot go faster than one run per
(commits per run x one commit's latency), whatever the engine does. ``commit_floor`` measures that
latency without the engine: a fresh file with the engine's settings (WAL, the same
``synchronous``), and transactions that each write one ~200-byte row into each of ``pages`` tables
(so each commit writes about ``pages`` pages to the WAL: the engine's commits write 6 to 7, counted
with ``strace -e trace=pwrite64``), committed one after another from one thread.
"""

from __future__ import annotations

import sqlite3
import statistics
import time
from pathlib import Path
from typing import Any

#: pages (tables) per commit: about what one of the engine's transitions writes
PAGES = 6
#: pages written before SQLite's first automatic checkpoint lets the WAL start over
WAL_RESTART_PAGES = 1_000


def commit_floor(
    directory: Path, synchronous: str, *, commits: int = 500, pages: int = PAGES, warmup: int = 20
) -> dict[str, Any]:
    """Median and p90 latency (ms) of ``commits`` bare commits of ``pages`` pages each, after
    ``warmup`` commits that are not counted."""
    path = directory / "commit-floor.db"
    for leftover in (path, Path(f"{path}-wal"), Path(f"{path}-shm")):
        leftover.unlink(missing_ok=True)
    conn = sqlite3.connect(path, isolation_level=None)
    try:
        conn.execute("PRAGMA journal_mode = WAL")
        conn.execute(f"PRAGMA synchronous = {synchronous}")
        for t in range(pages):
            conn.execute(f"CREATE TABLE t{t} (id INTEGER PRIMARY KEY, v BLOB NOT NULL)")
        row = b"r" * 200
        times = []
        for _ in range(commits + warmup):  # the first warm the file up and are not counted
            started = time.perf_counter()
            conn.execute("BEGIN IMMEDIATE")
            for t in range(pages):
                conn.execute(f"INSERT INTO t{t} (v) VALUES (?)", (row,))
            conn.execute("COMMIT")
            times.append(time.perf_counter() - started)
    finally:
        conn.close()
        for leftover in (path, Path(f"{path}-wal"), Path(f"{path}-shm")):
            leftover.unlink(missing_ok=True)
    counted = sorted(times[warmup:])
    median = statistics.median(counted)
    return {
        "commits": commits,
        "pages_per_commit": pages,
        "synchronous": synchronous,
        "median_ms": round(median * 1000, 4),
        "p90_ms": round(counted[int(len(counted) * 0.9)] * 1000, 4),
        "commits_per_s": round(1 / median, 1),
    }


def ceiling(floor: dict[str, Any], commits_per_run: float | None) -> float | None:
    """Runs/s one at a time could reach at most with ``commits_per_run`` commits of this floor."""
    if not commits_per_run:
        return None
    return round(1000 / (floor["median_ms"] * commits_per_run), 1)


def main(argv: list[str] | None = None) -> int:
    """``python -m bench._disk [--pages 1 2 4 8 12]``: the floor for each number of pages a
    commit writes (the engine's: 2 for a step's result, 8 for a run's creation or end)."""
    import argparse
    import tempfile

    parser = argparse.ArgumentParser(description="bare SQLite commits of N pages each, by N")
    parser.add_argument("--pages", type=int, nargs="+", default=[1, 2, 4, 8, 12])
    parser.add_argument("--commits", type=int, default=2000)
    parser.add_argument("--synchronous", default="FULL")
    parser.add_argument(
        "--dir", type=Path, default=None, help="where the file goes (default: a temporary folder)"
    )
    args = parser.parse_args(argv)
    if any(p < 1 for p in args.pages) or args.commits < 1:
        parser.error("--pages and --commits: at least 1")
    with tempfile.TemporaryDirectory(dir=args.dir) as directory:
        for pages in args.pages:
            # Warmed past the WAL's first checkpoint (SQLite's default, 1,000 pages): every counted
            # commit then writes over the WAL's old frames instead of growing the file, which
            # costs the file system's journal a commit of its own (the engine's steady state).
            warmup = max(20, WAL_RESTART_PAGES // pages + 20)
            f = commit_floor(
                Path(directory), args.synchronous.upper(), commits=args.commits, pages=pages, warmup=warmup
            )
            print(f"{pages:3d} pages a commit: median {f['median_ms']:.3f} ms, p90 {f['p90_ms']:.3f} ms "
                  f"({f['commits']} commits, synchronous={f['synchronous']})")  # fmt: skip
    return 0


if __name__ == "__main__":
    raise SystemExit(main())
