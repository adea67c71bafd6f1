"""The fast subset of the crash-restart campaigns (issue 11 B.1): each campaign's processes are
killed at every named crash point and at random moments, and the oracle finds nothing after any
trial. ``python -m tests.reliability --full`` runs the same campaigns at full size."""

from __future__ import annotations

from pathlib import Path

import pytest
from tests.reliability.campaigns import CAMPAIGNS, FAST, expected_points, run_campaign
from tests.reliability.conftest import require
from tests.reliability.oracle import Figures


@pytest.mark.timeout(600)
@pytest.mark.parametrize(("face", "backend"), CAMPAIGNS, ids=[f"{f}-{b}" for f, b in CAMPAIGNS])
def test_crash_restart_campaign(face: str, backend: str, tmp_path: Path, summary: list[Figures]) -> None:
    if backend == "postgresql":
        require("postgresql")
    if face == "celery":
        require("redis")
    trials = FAST[(face, backend)]
    figures = run_campaign(face, backend, trials, tmp_path)
    summary.append(figures)
    assert figures.violations == [], "\n".join(figures.violations[:30])
    assert figures.trials == trials
    # Every trial's process died on the way, at a crash point or by a kill (a trial whose process
    # finished before its crash point is the exception, not the rule).
    assert sum(figures.crash_points.values()) + figures.kills >= trials * 0.6, figures.row()
    assert expected_points(face) <= set(figures.crash_points), figures.row()
    assert figures.runs >= trials, figures.row()
