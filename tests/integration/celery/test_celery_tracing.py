"""Traces through Celery: a run started by one process, its first turn on one ``pyworkflow
worker``, the decision from another process, and its resumed turn on a second worker (the first
SIGKILLed while the run waited) are one trace; each turn also links to the span whose message
woke it (the W3C headers of the Celery message). Real workers, PostgreSQL, Redis."""

from __future__ import annotations

import os
import subprocess
import sys
from pathlib import Path

from charness import ROOT, Cluster

SPANS = ROOT / "tests" / "spans"
sys.path.insert(0, str(SPANS))

import spanfile  # noqa: E402
from trace_checks import check_one_trace  # noqa: E402


def _program(cluster: Cluster, env: dict[str, str], command: str, arg: str) -> str:
    code = "import sys, traced_flow; traced_flow.main(sys.argv[1:])"
    done = subprocess.run(
        [sys.executable, "-c", code, command, cluster.storage, arg],
        env=env, capture_output=True, text=True, timeout=120,
    )  # fmt: skip
    assert done.returncode == 0, f"{command} failed:\n{done.stderr[-3000:]}\n{cluster.logs()}"
    return done.stdout.strip()


def test_a_run_through_celery_is_one_trace_and_turns_link_to_their_message(
    redis_cluster: Cluster, tmp_path: Path
) -> None:
    cluster = redis_cluster
    spans_dir = tmp_path / "spans"
    spans_dir.mkdir()
    token_file = tmp_path / "token"  # written by the worker that runs the step hook
    env = {
        **cluster.env,
        "TRACED_TOKEN_FILE": str(token_file),
        "PYTHONPATH": os.pathsep.join([str(SPANS), cluster.env["PYTHONPATH"]]),
        "TEST_SPAN_DIR": str(spans_dir),
        "TRACED_BROKER": cluster.broker,
        "TRACED_QUEUE": cluster.queue,
    }
    first = cluster.start_worker(concurrency=2, extra_env=env)
    run_id = _program(cluster, env, "start", str(token_file))
    cluster.kill(first)  # the run waits holding nothing; another worker resumes it
    cluster.start_worker(concurrency=2, extra_env=env)
    _program(cluster, env, "decide", token_file.read_text())
    cluster.wait_statuses("completed", 1, timeout=60)
    cluster.wait_for(
        "the last turn's span",
        lambda: len(spanfile.named(spanfile.read(spans_dir), "pyworkflow.turn")) == 2,
        30,
    )
    spans = spanfile.read(spans_dir)
    start = check_one_trace(spans, run_id)
    turns = spanfile.named(spans, "pyworkflow.turn")
    (decision,) = spanfile.named(spans, "pyworkflow.decision")
    assert turns[0]["links"] == [start["span_id"]], "the first turn links to the start's message"
    assert turns[1]["links"] == [decision["span_id"]], "the resumed turn links to the decision's message"
    assert turns[0]["pid"] == first.pid
