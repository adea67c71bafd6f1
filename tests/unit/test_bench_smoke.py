"""The HITL benchmark harness runs end to end (``--quick``); this checks the harness, not speed."""

from __future__ import annotations

import json
import subprocess
import sys
from pathlib import Path

ROOT = Path(__file__).resolve().parents[2]


def test_hitl_benchmark_quick_runs_all_phases(tmp_path: Path) -> None:
    out = tmp_path / "hitl.json"
    proc = subprocess.run(
        [sys.executable, "-m", "bench.hitl", "--quick", "--dir", str(tmp_path / "db"), "--out", str(out)],
        cwd=ROOT,
        capture_output=True,
        text=True,
        timeout=120,
    )
    assert proc.returncode == 0, proc.stdout + proc.stderr
    for phase in ("phase A start+suspend", "phase B resume+complete", "phase C plain"):
        assert phase in proc.stdout, proc.stdout
    assert "runs/s" in proc.stdout
    assert "resume+complete, suspended runs" in proc.stdout
    result = json.loads(out.read_text())
    assert set(result["phases"]) == {"A", "B", "C"}
    assert result["prepare_calls"] == result["config"]["n"] == 200
    assert result["while_suspended"]["suspended_runs"] == 200
