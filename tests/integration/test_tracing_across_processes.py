"""Traces of a pyworkflow run across processes (OpenTelemetry SDK in every process, see
tests/spans/): one process starts a run that suspends on a step hook, another decides it, a third
(its spans held by the SDK's ``InMemorySpanExporter``) resumes it on the same store. The run is
one trace: every span after the start is a child of the stored context, however many processes
it crossed. On SQLite and, with ``PYWORKFLOW_TEST_STORE=postgresql``, PostgreSQL."""

from __future__ import annotations

import os
import subprocess
import sys
from pathlib import Path

SPANS = Path(__file__).resolve().parents[1] / "spans"
sys.path.insert(0, str(SPANS))

import spanfile  # noqa: E402
from trace_checks import check_one_trace  # noqa: E402

ROOT = SPANS.parents[1]


def traced_env(span_dir: Path, mode: str = "file", **more: str) -> dict[str, str]:
    path = os.pathsep.join([str(SPANS), str(ROOT / "src"), os.environ.get("PYTHONPATH", "")])
    return {**os.environ, "PYTHONPATH": path, "TEST_SPAN_DIR": str(span_dir), "TEST_SPAN_MODE": mode, **more}


def run_program(command: str, storage: str, arg: str, env: dict[str, str]) -> str:
    """One of traced_flow's programs in a new process; its stdout."""
    code = "import sys, traced_flow; traced_flow.main(sys.argv[1:])"
    done = subprocess.run(
        [sys.executable, "-c", code, command, storage, arg],
        env=env,
        capture_output=True,
        text=True,
        timeout=120,
    )
    assert done.returncode == 0, f"{command} failed:\n{done.stderr[-3000:]}"
    return done.stdout.strip()


def test_a_run_suspended_decided_and_resumed_in_three_processes_is_one_trace(
    store_url: str, tmp_path: Path
) -> None:
    spans_dir = tmp_path / "spans"
    spans_dir.mkdir()
    token_file = tmp_path / "token"
    run_id = run_program("start", store_url, str(token_file), traced_env(spans_dir))
    token = token_file.read_text()
    run_program("decide", store_url, token, traced_env(spans_dir))
    out = run_program("resume", store_url, run_id, traced_env(spans_dir, "memory"))
    assert out == "completed published"
    spans = spanfile.read(spans_dir)
    check_one_trace(spans, run_id)
    # never a secret in an attribute: the hook's token appears nowhere
    text = repr([s["attributes"] for s in spans])
    assert token not in text and "pwh_" not in text
