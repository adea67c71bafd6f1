"""``python -m tests.reliability [--full | --trials N] [--faces ...] [--backends ...]``: run the
crash-restart campaigns and print the summary table; exits 1 when the oracle found a violation
or a crash point was not hit. ``make reliability`` runs the full size."""

from __future__ import annotations

import argparse
import sys
import tempfile
import traceback
from pathlib import Path

from tests.reliability.campaigns import CAMPAIGNS, FAST, FULL, expected_points, run_campaign
from tests.reliability.oracle import Figures


def make_parser() -> argparse.ArgumentParser:
    parser = argparse.ArgumentParser(prog="python -m tests.reliability", description=__doc__)
    size = parser.add_mutually_exclusive_group()
    size.add_argument("--full", action="store_true", help="2,000 trials per backend")
    size.add_argument("--trials", type=int, help="trials per campaign (the size knob)")
    size.add_argument("--scale", type=float, help="multiply the fast sizes (0.5, 3, ...)")
    parser.add_argument("--faces", default="local,celery,graph")
    parser.add_argument("--backends", default="sqlite,postgresql")
    parser.add_argument("--seed", type=int, default=0)
    parser.add_argument("--workdir", type=Path, help="keep databases and ledgers here")
    return parser


def main(argv: list[str] | None = None) -> int:
    ns = make_parser().parse_args(argv)
    faces, backends = ns.faces.split(","), ns.backends.split(",")
    base = Path(ns.workdir or tempfile.mkdtemp(prefix="reliability-"))
    results: list[Figures] = []
    failed = False
    for face, backend in CAMPAIGNS:
        if face not in faces or backend not in backends:
            continue
        if ns.trials:
            trials = ns.trials
        elif ns.full:
            trials = FULL[(face, backend)]
        else:
            trials = max(1, round(FAST[(face, backend)] * (ns.scale or 1)))
        print(f"{face} on {backend}: {trials} trials ...", file=sys.stderr, flush=True)
        try:
            figures = run_campaign(face, backend, trials, base / f"{face}-{backend}", ns.seed)
        except Exception:  # the harness itself broke: say so, keep the other campaigns' figures
            traceback.print_exc()
            print(f"  CAMPAIGN BROKE {face}/{backend}: no figures", file=sys.stderr, flush=True)
            failed = True
            continue
        results.append(figures)
        print(f"  {figures.row()}", file=sys.stderr, flush=True)  # kept should a later one break
        missing = expected_points(face) - set(figures.crash_points)
        for line in figures.violations[:20]:
            print(f"  VIOLATION {face}/{backend}: {line}", file=sys.stderr)
        if missing:
            print(f"  crash points never hit on {face}/{backend}: {sorted(missing)}", file=sys.stderr)
        failed = failed or bool(figures.violations) or bool(missing)
    print(Figures.HEADER)
    for figures in results:
        print(figures.row())
    print(f"\ndatabases and ledgers: {base}")
    return 1 if failed else 0


if __name__ == "__main__":
    raise SystemExit(main())
