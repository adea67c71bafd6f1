"""The README's main job (``make run``) works end to end: pyworkflow's review step, then the graph
server, a worker and one approval cycle, all on the embedded SQLite default."""

from __future__ import annotations

import os
import socket
import subprocess
import sys
from pathlib import Path

REPO = Path(__file__).resolve().parents[2]


def test_main_job_runs_once(tmp_path: Path) -> None:
    with socket.socket() as sock:
        sock.bind(("127.0.0.1", 0))
        port = sock.getsockname()[1]
    env = {**os.environ, "ATFGRAPH_HOME": str(tmp_path), "PYTHONPATH": str(REPO)}
    env.pop("ATFGRAPH_TOKEN", None)
    proc = subprocess.run(
        [sys.executable, "-m", "examples.main_job", "--once", "--port", str(port)],
        cwd=REPO,
        env=env,
        capture_output=True,
        text=True,
        timeout=180,
    )
    out = proc.stdout + proc.stderr
    assert proc.returncode == 0, out
    assert "run " in out and ": completed" in out  # the pyworkflow part
    assert "expensive_setup ran 1 time(s)" in out
    assert "decided    approved by owner" in out
    assert '"attempts": 2' in out and '"prepared_on_attempt": 1' in out
    assert (tmp_path / "credentials.json").exists()
    assert "Exception" not in out, out
