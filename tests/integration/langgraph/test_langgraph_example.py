"""The support-chat example runs offline, as docs/langgraph.md says."""

from __future__ import annotations

import os
import subprocess
import sys
from pathlib import Path

REPO = Path(__file__).resolve().parents[3]


def test_support_chat_example_runs_offline(tmp_path: Path) -> None:
    env = {k: v for k, v in os.environ.items() if k != "LG_COUNTS_DIR"}
    done = subprocess.run(
        [sys.executable, "-m", "examples.pyworkflow.support_chat", "--db", str(tmp_path / "s.db")],
        cwd=REPO,
        env=env,
        capture_output=True,
        text=True,
        timeout=120,
    )
    assert done.returncode == 0, done.stderr
    lines = done.stdout.splitlines()
    assert "agent asks the visitor: What is your order number?" in "\n".join(lines)
    assert any(line.endswith("suspended (nothing is held while the visitor types)") for line in lines)
    assert "agent: Order 4711 has shipped and arrives on Friday." in lines
    assert "model calls: 3 (one per turn; none repeated after the resume)" in lines
