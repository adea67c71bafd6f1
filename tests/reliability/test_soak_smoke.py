"""A short smoke of the soak command (``python -m tests.reliability.soak``): a few dozen parked
runs, decisions and timers for some seconds with a worker killed on the way; the same checks
as the full soak (the oracle, flat memory, descriptors and connections, every decided run
finished)."""

from __future__ import annotations

from pathlib import Path

import pytest
from tests.reliability.soak import soak


@pytest.mark.timeout(180)
async def test_soak_smoke(tmp_path: Path) -> None:
    report = await soak("sqlite", 40, 8.0, rate=5.0, kill_every=4.0, sample_every=1.0, workdir=tmp_path)
    assert report.failures == [], report.summary()
    assert report.decisions > 0 and len(report.latencies) == report.decisions, report.summary()
    assert report.kills >= 1
