"""The pyworkflow snippets of README.md and docs/*.md run as the pages show them.

The README's "A taste" is followed to its end in separate processes: the sample saved as
``review.py`` starts a run, another program resumes its hook with the printed token, and a third
serves the database, which imports ``review.py`` to find the workflow and logs what it ran. The
docs' fragments (step-hooks.md) run with the names they leave to the reader defined here."""

from __future__ import annotations

import os
import queue
import re
import shlex
import signal
import subprocess
import sys
import threading
import time
from pathlib import Path
from typing import Any

import pyworkflow
from doc_snippets import code_blocks, shell_lines

#: The placeholder the README's resume command carries for the token ``review.py`` printed.
TOKEN_PLACEHOLDER = "pwh_THE_TOKEN"


def _env() -> dict[str, str]:
    env = {k: v for k, v in os.environ.items() if not k.startswith("PYWORKFLOW_")}
    env["PYTHONPATH"] = ""  # only what a reader has: the installed package and the current folder
    return env


def _python(command: str) -> list[str]:
    """A ``python ...`` command line as the shell splits it, run by this interpreter."""
    argv = shlex.split(command)
    assert argv[0] == "python", command
    return [sys.executable, *argv[1:]]


def _ctrl_c_stops() -> None:
    """In the child: Ctrl-C's signal at its default, as a terminal gives it. A test run started
    in the background of a non-interactive shell has SIGINT ignored, children inherit that, and
    Python then installs no KeyboardInterrupt handler (nor asyncio.run its own), so the SIGINT
    below would not stop the serving process."""
    signal.signal(signal.SIGINT, signal.SIG_DFL)


def _serve_until(command: str, cwd: Path, pattern: str, seconds: float = 60) -> str:
    """Run the README's serve command until its log matches ``pattern``, then Ctrl-C it."""
    proc = subprocess.Popen(
        _python(command), cwd=cwd, env=_env(), stderr=subprocess.PIPE, text=True, preexec_fn=_ctrl_c_stops
    )
    assert proc.stderr is not None
    lines: queue.Queue[str] = queue.Queue()
    reader = threading.Thread(target=lambda: [lines.put(line) for line in proc.stderr or ()], daemon=True)
    reader.start()
    log = ""
    deadline = time.monotonic() + seconds
    try:
        while not re.search(pattern, log):
            try:
                log += lines.get(timeout=max(0.0, deadline - time.monotonic()))
            except queue.Empty:
                raise AssertionError(f"serve() never logged {pattern!r} in {seconds} s:\n{log}") from None
    finally:
        proc.send_signal(signal.SIGINT)
        try:
            proc.wait(30)
        except subprocess.TimeoutExpired:
            proc.kill()  # not left running after the test failed
            proc.wait()
            raise
        reader.join(30)
        proc.stderr.close()
    while not lines.empty():
        log += lines.get()
    return log


async def test_readme_taste_followed_to_its_end(tmp_path: Path) -> None:
    sample, commands = (
        code_blocks("README.md", "A taste", "python")[0],
        code_blocks("README.md", "A taste", "sh"),
    )
    (tmp_path / "review.py").write_text(sample)
    start, resume, serve = shell_lines(commands[0])
    assert (start, TOKEN_PLACEHOLDER in resume) == ("python review.py", True)

    started = subprocess.run(
        _python(start), cwd=tmp_path, env=_env(), capture_output=True, text=True, timeout=60
    )
    assert started.returncode == 0, started.stderr
    token, status = started.stdout.splitlines()
    run_id = re.fullmatch(r"run (\S+): suspended", status)
    assert token.startswith("pwh_") and run_id is not None, started.stdout

    resumed = subprocess.run(
        _python(resume.replace(TOKEN_PLACEHOLDER, token)),
        cwd=tmp_path,
        env=_env(),
        capture_output=True,
        text=True,
        timeout=60,
    )
    assert resumed.returncode == 0, resumed.stderr

    log = _serve_until(serve, tmp_path, rf"run {re.escape(run_id.group(1))}: (completed|failed)")
    assert f"run {run_id.group(1)}: resuming review:publish" in log, log
    assert f"run {run_id.group(1)}: completed" in log, log
    assert "serving runs stored in review.db" in log

    pyworkflow.configure(storage=f"sqlite:///{tmp_path / 'review.db'}")
    try:
        run = await pyworkflow.get_workflow_run(run_id.group(1))
    finally:
        await pyworkflow.shutdown()
    assert (run.status, run.result) == ("completed", {"approved": True})


def test_a_workflow_no_process_can_import_fails_saying_what_to_do(tmp_path: Path) -> None:
    """The README's sample typed into ``python -`` (an interactive session has no file to import):
    the serving process fails the run with an error that says what to do, and logs it."""
    sample = code_blocks("README.md", "A taste", "python")[0]
    started = subprocess.run(
        [sys.executable, "-"],
        input=sample,
        cwd=tmp_path,
        env=_env(),
        capture_output=True,
        text=True,
        timeout=60,
    )
    assert started.returncode == 0, started.stderr
    run_id = started.stdout.splitlines()[1].split()[1].rstrip(":")
    resume, serve = shell_lines(code_blocks("README.md", "A taste", "sh")[0])[1:]
    subprocess.run(
        _python(resume.replace(TOKEN_PLACEHOLDER, started.stdout.splitlines()[0])),
        cwd=tmp_path,
        env=_env(),
        check=True,
        timeout=60,
    )
    log = _serve_until(serve, tmp_path, rf"run {re.escape(run_id)} failed")
    assert f"WARNING pyworkflow: run {run_id} failed: workflow '__main__:publish' is not registered" in log
    assert "Define it in a module (a .py file), import that module in the process that serves runs" in log


def test_a_scripts_workflow_is_named_after_its_module(tmp_path: Path) -> None:
    (tmp_path / "pkg").mkdir()
    (tmp_path / "pkg" / "__init__.py").write_text("")
    code = (
        "import pyworkflow\n"
        "@pyworkflow.workflow\n"
        "async def publish() -> None: ...\n"
        "from pyworkflow._workflow import definition_of\n"
        "print(definition_of(publish).name, definition_of(publish).module)\n"
    )
    (tmp_path / "pkg" / "flow.py").write_text(code)
    (tmp_path / "flow.py").write_text(code)
    names = {}
    for argv in (["flow.py"], ["-m", "flow"], ["-m", "pkg.flow"]):
        done = subprocess.run(
            [sys.executable, *argv], cwd=tmp_path, env=_env(), capture_output=True, text=True, timeout=60
        )
        assert done.returncode == 0, done.stderr
        names[" ".join(argv)] = done.stdout.strip()
    assert names == {
        "flow.py": "flow:publish flow",
        "-m flow": "flow:publish flow",
        "-m pkg.flow": "pkg.flow:publish pkg.flow",
    }


# -- docs/step-hooks.md ----------------------------------------------------------------------------


async def test_step_hooks_snippet(tmp_path: Path) -> None:
    """The page's ``review_step``, with the four functions it leaves to the reader."""
    calls: list[str] = []
    tokens: list[str] = []

    async def expensive_setup(draft: str) -> dict[str, Any]:
        calls.append(draft)
        return {"draft": draft}

    async def send_to_reviewer(token: str) -> None:
        tokens.append(token)

    async def finalize(state: dict[str, Any], feedback: dict[str, Any]) -> dict[str, Any]:
        return {**state, **feedback}

    async def finalize_without_review(state: dict[str, Any]) -> dict[str, Any]:
        return {**state, "approved": None}

    namespace: dict[str, Any] = {
        "__name__": "step_hooks_snippet",
        "expensive_setup": expensive_setup,
        "send_to_reviewer": send_to_reviewer,
        "finalize": finalize,
        "finalize_without_review": finalize_without_review,
    }
    exec(code_blocks("docs/step-hooks.md", "Step hooks and checkpoints", "python")[0], namespace)
    pyworkflow.configure(storage=f"sqlite:///{tmp_path / 'hooks.db'}")
    try:
        run_id = await pyworkflow.start(namespace["publish"], "a draft")
        await pyworkflow.wait_for_run(run_id, 30, until=("suspended",))
        await pyworkflow.resume_hook(tokens[0], {"approved": True})
        run = await pyworkflow.wait_for_run(run_id, 30)
    finally:
        await pyworkflow.shutdown()
    assert (run.status, run.result, calls) == (
        "completed",
        {"draft": "a draft", "approved": True},
        ["a draft"],
    )
