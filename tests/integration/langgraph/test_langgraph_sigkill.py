"""Test 2 of issue 6: processes killed with SIGKILL, conversations resumed by new processes from the
step checkpoint. Real subprocesses on one SQLite file; every count comes from files they append to."""

from __future__ import annotations

import json
import os
import signal
import subprocess
import sys
import time
from pathlib import Path
from typing import Any

import lg_agents

DEADLINE = 60
ANSWER = "Thanks! Order 4711 has shipped and arrives on Friday."


def _wait_for(predicate: Any, what: str) -> None:
    end = time.monotonic() + DEADLINE
    while not predicate():
        if time.monotonic() > end:
            raise AssertionError(f"timed out waiting for {what}")
        time.sleep(0.05)


def _driver(*arguments: str) -> list[str]:
    return [sys.executable, "-m", "lg_driver", *arguments]


def _start_and_kill_while_waiting(db_url: str, counts_dir: Path, env: dict[str, str]) -> tuple[str, str, int]:
    """Process A starts the conversation, which asks the visitor and suspends; A keeps serving and is
    killed with SIGKILL. Returns the run id, the token the visitor got, and A's pid."""
    with subprocess.Popen(_driver("start", db_url), env=env, stdout=subprocess.PIPE, text=True) as first:
        try:
            assert first.stdout is not None
            started = json.loads(first.stdout.readline())
            assert started["status"] == "suspended"
            _wait_for(lambda: lg_agents.recorded("on_created", counts_dir), "the question to the visitor")
        finally:
            os.kill(first.pid, signal.SIGKILL)
            first.wait(DEADLINE)
    assert first.returncode == -signal.SIGKILL
    [question] = lg_agents.recorded("on_created", counts_dir)
    assert [call["messages"] for call in lg_agents.recorded("model", counts_dir)] == [1, 3]
    return started["run_id"], question["token"], first.pid


def _finished(done: subprocess.CompletedProcess[str]) -> dict[str, Any]:
    assert done.returncode == 0, done.stderr
    result: dict[str, Any] = json.loads(done.stdout.strip().splitlines()[-1])
    return result


def test_sigkill_while_waiting_then_resume_in_a_new_process(
    db_url: str, counts_dir: Path, subprocess_env: dict[str, str]
) -> None:
    run_id, token, first_pid = _start_and_kill_while_waiting(db_url, counts_dir, subprocess_env)

    finished = _finished(
        subprocess.run(
            _driver("resume", db_url, run_id, token, "4711"),
            env=subprocess_env,
            capture_output=True,
            text=True,
            timeout=DEADLINE,
        )
    )

    assert finished["status"] == "completed", finished
    assert finished["result"] == ANSWER
    model_calls = lg_agents.recorded("model", counts_dir)
    # The new process continued from the restored transcript (5 and 7 messages): turns 1 and 2 were
    # not asked of the model again.
    assert [call["messages"] for call in model_calls if call["pid"] != first_pid] == [5, 7]
    assert len(model_calls) == 4
    assert lg_agents.recorded("open_ticket", counts_dir) == ["order"]  # the side effect ran once
    assert lg_agents.recorded("lookup_order", counts_dir) == ["4711"]
    assert len(lg_agents.recorded("on_created", counts_dir)) == 1  # the visitor was not asked again
    assert lg_agents.recorded("credit", counts_dir) == ["charged"]  # the credit check ran once


def test_sigkill_after_the_answer_then_another_process_recovers_the_run(
    db_url: str, counts_dir: Path, subprocess_env: dict[str, str]
) -> None:
    """Process B receives the answer and is killed inside a slow tool; process C recovers the run from
    the checkpoint. Only the stretch after the answer runs again (the documented at-least-once window):
    the turns before the question, the question itself and the credit check do not."""
    run_id, token, first_pid = _start_and_kill_while_waiting(db_url, counts_dir, subprocess_env)

    slow_env = {**subprocess_env, "LG_LOOKUP_DELAY": "30"}
    with subprocess.Popen(
        _driver("resume", db_url, run_id, token, "4711"), env=slow_env, stdout=subprocess.DEVNULL
    ) as second:
        try:
            _wait_for(lambda: lg_agents.recorded("lookup_started", counts_dir), "the slow lookup")
        finally:
            os.kill(second.pid, signal.SIGKILL)
            second.wait(DEADLINE)

    finished = _finished(
        subprocess.run(
            _driver("serve", db_url, run_id),
            env=subprocess_env,
            capture_output=True,
            text=True,
            timeout=DEADLINE,
        )
    )

    assert finished["status"] == "completed", finished
    assert finished["result"] == ANSWER
    by_process = [
        [call["messages"] for call in lg_agents.recorded("model", counts_dir) if call["pid"] == pid]
        for pid in (first_pid, second.pid)
    ]
    assert by_process == [[1, 3], [5]]
    later = [
        c["messages"]
        for c in lg_agents.recorded("model", counts_dir)
        if c["pid"] not in (first_pid, second.pid)
    ]
    assert later == [5, 7]  # turn 3 again (after the answer, before any checkpoint), then the answer
    assert lg_agents.recorded("lookup_order", counts_dir) == ["4711"]
    assert lg_agents.recorded("open_ticket", counts_dir) == ["order"]
    assert len(lg_agents.recorded("on_created", counts_dir)) == 1
    assert lg_agents.recorded("credit", counts_dir) == ["charged"]
