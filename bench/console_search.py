"""What a search in the review console reads: the Runs page and the inbox with N parked runs.

    .venv/bin/python -m bench.console_search [--n 200000] [--store sqlite|postgresql] [--url URL]

Parks ``--n`` runs as ``bench.parked`` does (one step that checkpoints and waits on a step hook;
SQLite ``synchronous=FULL`` in a temporary folder, or a new database on the PostgreSQL server at
``--url``, dropped after), then times the console's own store reads (``GraphStore.console_runs``,
``console_run_counts``, ``console_inbox``; the first page, 50 rows), median of ``--repeat``, for
four searches: none; a term every run matches (its workflow's name); a term no run matches; and
the id of the first run parked, the oldest, which lies past the first window. For that id it
also follows the Runs page's "older" cursor, as a person clicking on would, until the run shows:
the pages read and their time in all. A search reads at most ``SEARCH_WINDOW`` rows a request;
its counts are of the newest window and end in "+" (``partial``) when there are more runs.
"""

from __future__ import annotations

import argparse
import asyncio
import os
import statistics
import sys
import tempfile
import time
from collections.abc import Callable, Sequence
from functools import partial
from pathlib import Path
from typing import Any

from . import parked
from ._observers import RESULTS_DIR, add_store_arguments, fresh_database, save_and_report, storage_url

PAGE = 50


def timed(fn: Callable[[], Any], repeat: int) -> tuple[float, Any]:
    """The median milliseconds of ``repeat`` calls of ``fn``, and its last answer."""
    ms, answer = [], None
    for _ in range(repeat):
        started = time.perf_counter()
        answer = fn()
        ms.append((time.perf_counter() - started) * 1000)
    return round(statistics.median(ms), 2), answer


def measure(
    location: str, terms: dict[str, str | None], oldest: str, repeat: int, window: int | None
) -> dict[str, Any]:
    # The graph server's own store class (not a public name): the console's reads themselves.
    from atfgraph.server import _console_reads
    from atfgraph.server._store import GraphStore

    if window is not None:
        _console_reads.SEARCH_WINDOW = window
    store = GraphStore(location)
    try:
        kinds = ("approval", "hook", "step_hook")
        searches: dict[str, Any] = {}
        every = ("all", None, None, None)  # every kind of run, no other filter
        for name, term in terms.items():
            runs_ms, page = timed(partial(store.console_runs, *every, None, PAGE, term), repeat)
            counts_ms, counts = timed(partial(store.console_run_counts, *every, term), repeat)
            inbox_ms, inbox = timed(partial(store.console_inbox, kinds, term, None, PAGE), repeat)
            searches[name] = {
                "term": term,
                "runs_page_ms": runs_ms,
                "runs_shown": len(page.items),
                "runs_page_stopped": page.stopped,
                "run_counts_ms": counts_ms,
                "run_counts": counts.by_status,
                "run_counts_partial": counts.partial,
                "inbox_page_ms": inbox_ms,
                "inbox_shown": len(inbox.items),
                "inbox_page_stopped": inbox.stopped,
            }
        pages, started = 0, time.perf_counter()
        page = store.console_runs("all", None, None, None, None, PAGE, oldest)
        while True:
            pages += 1
            if any(r["id"] == oldest for r in page.items) or page.next is None:
                break
            page = store.console_runs("all", None, None, None, None, PAGE, oldest, after=page.next)
        found = any(r["id"] == oldest for r in page.items)
        walk = {"pages": pages, "seconds": round(time.perf_counter() - started, 3), "found": found}
        return {
            "search_window": _console_reads.SEARCH_WINDOW,
            "searches": searches,
            "walk_to_the_oldest_run_by_id": walk,
        }
    finally:
        store.close()


async def park(storage: str, n: int, batch: int) -> dict[str, Any]:
    return await parked.park(storage, n, batch, {0}, 0.05)


def run(args: argparse.Namespace) -> dict[str, Any]:
    workdir = Path(tempfile.mkdtemp(prefix="pyworkflow-search-"))
    with fresh_database(args.store, args.url, "search") as pg:
        storage = storage_url(args.store, workdir / "search.db", pg)
        parked_runs = asyncio.run(park(storage, args.n, args.batch))
        oldest = parked_runs["run_ids"][0]
        location = str(workdir / "search.db") if args.store == "sqlite" else storage
        terms = {"none": None, "every_run": parked.PARKED, "no_run": "no-such-text", "oldest_run_id": oldest}
        measured = measure(location, terms, oldest, args.repeat, args.window)
    return {
        "config": {
            "n": args.n,
            "store": args.store,
            "repeat": args.repeat,
            "command": " ".join([Path(sys.executable).name, "-m", "bench.console_search", *sys.argv[1:]]),
            "cpus": os.cpu_count(),
            "date_utc": time.strftime("%Y-%m-%dT%H:%M:%SZ", time.gmtime()),
            "loadavg": [round(x, 2) for x in os.getloadavg()],
        },
        "parking_seconds": parked_runs["seconds"],
        **measured,
    }


def report(result: dict[str, Any]) -> None:
    c = result["config"]
    print(f"{c['n']:,} parked runs on {c['store']}; a search reads {result['search_window']:,} rows a time")
    print(f"{'search':<18} {'Runs page':>10} {'its counts':>11} {'inbox':>8}   (ms, median of {c['repeat']})")
    for name, s in result["searches"].items():
        marks = " ".join(
            m
            for m, on in (
                ("runs-page-stopped", s["runs_page_stopped"]),
                ("counts-partial", s["run_counts_partial"]),
                ("inbox-stopped", s["inbox_page_stopped"]),
            )
            if on
        )
        times = f"{s['runs_page_ms']:>10} {s['run_counts_ms']:>11} {s['inbox_page_ms']:>8}"
        print(f"{name:<18} {times}   {marks}")
    w = result["walk_to_the_oldest_run_by_id"]
    print(f"the oldest run by its id: {w['pages']} pages in {w['seconds']} s, found: {w['found']}")


def parse_args(argv: Sequence[str] | None) -> argparse.Namespace:
    parser = argparse.ArgumentParser(description=(__doc__ or "").splitlines()[0])
    parser.add_argument("--n", type=int, default=200_000, help="runs to park (default 200,000)")
    parser.add_argument("--batch", type=int, default=2000, help="concurrent starts while parking")
    parser.add_argument("--repeat", type=int, default=5, help="reads timed per figure (median)")
    parser.add_argument(
        "--window", type=int, default=None, help="rows a search reads (default the console's)"
    )
    add_store_arguments(parser)
    parser.add_argument("--out", type=Path, default=None, help="JSON output file")
    return parser.parse_args(argv)


def main(argv: Sequence[str] | None = None) -> int:
    args = parse_args(argv)
    result = run(args)
    return save_and_report(args.out or RESULTS_DIR / f"console-search-{args.store}.json", result, report)


if __name__ == "__main__":
    sys.exit(main())
