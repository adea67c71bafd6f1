"""The blocking forms work from synchronous code and refuse to block a running event loop."""

from __future__ import annotations

import asyncio
import subprocess
import sys
import textwrap
from pathlib import Path

import pytest

import pyworkflow

REPO = Path(__file__).resolve().parents[2]


def test_a_synchronous_program_resumes_a_hook(tmp_path: Path) -> None:
    """A plain script (no event loop of its own) checks, resumes and cancels runs."""
    module = tmp_path / "sync_flows.py"
    module.write_text(
        textwrap.dedent(
            """
            from pyworkflow import step, step_hook, workflow

            @step
            async def ask() -> object:
                return await step_hook("answer", on_created=lambda token: print("TOKEN", token, flush=True))

            @workflow
            async def asking() -> object:
                return await ask()
            """
        )
    )
    db = tmp_path / "sync.db"
    starter = f"""
import asyncio, pyworkflow, sync_flows
async def main():
    pyworkflow.configure(storage="sqlite:///{db}")
    run_id = await pyworkflow.start(sync_flows.asking)
    await pyworkflow.wait_for_run(run_id, 10, until=("suspended",))
    print("RUN", run_id, flush=True)
    await pyworkflow.shutdown()
asyncio.run(main())
"""
    env = {"PYTHONPATH": f"{tmp_path}:{REPO / 'src'}", "PATH": "/usr/bin:/bin"}
    out = subprocess.run([sys.executable, "-c", starter], env=env, capture_output=True, text=True, timeout=60)
    assert out.returncode == 0, out.stderr
    token = out.stdout.split("TOKEN ")[1].split()[0]
    run_id = out.stdout.split("RUN ")[1].split()[0]

    pyworkflow.configure(storage=f"sqlite:///{db}")
    try:
        assert pyworkflow.get_workflow_run_sync(run_id).status == pyworkflow.RunStatus.SUSPENDED
        result = pyworkflow.resume_hook_sync(token, {"ok": True})
        assert result.run_id == run_id and result.hook_name == "answer"
        with pytest.raises(pyworkflow.HookAlreadyReceivedError):
            pyworkflow.resume_hook_sync(token, {"ok": False})
        assert pyworkflow.cancel_workflow_sync(run_id) is True  # nothing serves it here: still open
        assert pyworkflow.get_workflow_run_sync(run_id).status == pyworkflow.RunStatus.CANCELLED
        with pytest.raises(pyworkflow.WorkflowNotFoundError):
            pyworkflow.get_workflow_run_sync("no-such-run")
    finally:
        asyncio.run(pyworkflow.shutdown())


async def test_blocking_forms_refuse_to_run_inside_an_event_loop(engine: str) -> None:
    with pytest.raises(pyworkflow.ConfigurationError, match="await resume_hook"):
        pyworkflow.resume_hook_sync("pwh_" + "a" * 32, None)
    with pytest.raises(pyworkflow.ConfigurationError, match="await get_workflow_run"):
        pyworkflow.get_workflow_run_sync("x")
