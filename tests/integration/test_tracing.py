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
from typing import Any

SPANS = Path(__file__).resolve().parents[1] / "spans"
sys.path.insert(0, str(SPANS))

import spanfile  # noqa: E402

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


def check_one_trace(spans: list[dict[str, Any]], run_id: str) -> dict[str, Any]:
    """The checks every traced run passes; returns its start span."""
    (start,) = spanfile.named(spans, "pyworkflow.start")
    assert start["attributes"]["pyworkflow.run_id"] == run_id
    assert start["attributes"]["pyworkflow.workflow"] == "traced_flow:traced"
    assert {s["trace_id"] for s in spans} == {start["trace_id"]}, "the run is one trace"
    turns = spanfile.named(spans, "pyworkflow.turn")
    assert [t["attributes"]["pyworkflow.status"] for t in turns] == ["suspended", "completed"]
    assert all(t["parent_id"] == start["span_id"] for t in turns), "turns continue the stored context"
    assert all(t["attributes"]["pyworkflow.run_id"] == run_id for t in turns)
    assert [t["attributes"]["pyworkflow.resumed"] for t in turns] == [False, True]
    assert turns[0]["pid"] != turns[1]["pid"], "the resumed turn ran in another process"
    steps = spanfile.named(spans, "pyworkflow.step")
    by_turn = {t["span_id"]: [] for t in turns}
    for s in steps:
        by_turn[s["parent_id"]].append(
            (s["attributes"]["pyworkflow.step"], s["attributes"]["pyworkflow.status"])
        )
    first, second = (by_turn[t["span_id"]] for t in turns)
    assert first == [("prepare#1", "completed"), ("review#1", "suspended")]
    # prepare is replayed (no span); review runs again and finds the decision
    assert second == [("review#1", "completed"), ("publish#1", "completed")]
    (wait,) = spanfile.named(spans, "pyworkflow.wait")
    assert wait["parent_id"] == start["span_id"]
    assert wait["attributes"]["pyworkflow.wait.kind"] == "step_hook"
    assert wait["attributes"]["pyworkflow.wait.name"] == "review"
    assert wait["attributes"]["pyworkflow.status"] == "received"
    (decision,) = spanfile.named(spans, "pyworkflow.decision")
    assert decision["parent_id"] == start["span_id"]
    assert decision["attributes"]["pyworkflow.wait_id"] == wait["attributes"]["pyworkflow.wait_id"]
    assert decision["pid"] not in (turns[0]["pid"], turns[1]["pid"]), "decided from another process"
    assert wait["start"] < decision["end"] <= wait["end"] + 10**9, "the wait lasts until its decision"
    return start


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
