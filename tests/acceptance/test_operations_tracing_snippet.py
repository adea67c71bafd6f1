"""docs/operations.md, "Tracing": the snippet that traces the local runtime in your own program
runs as the page shows it, and a run started after it is traced (its spans on stdout)."""

from __future__ import annotations

import json
import os
import subprocess
import sys
from pathlib import Path

from doc_snippets import code_blocks

RUN = """
import asyncio
from pyworkflow import step, workflow

@step
async def hello(name):
    return f"hello {name}"

@workflow
async def greet(name):
    return await hello(name)

async def main():
    run_id = await pyworkflow.start(greet, "ada")
    await pyworkflow.wait_for_run(run_id, 10)
    await pyworkflow.shutdown()
    provider.force_flush()

asyncio.run(main())
"""


def test_the_local_runtime_snippet_traces_a_run(tmp_path: Path) -> None:
    (snippet,) = code_blocks("docs/operations.md", "Set-up with an OTLP collector", "python")
    env = {k: v for k, v in os.environ.items() if not k.startswith(("PYWORKFLOW_", "OTEL_"))}
    done = subprocess.run(
        [sys.executable, "-c", snippet + RUN],
        cwd=tmp_path,
        env=env,
        capture_output=True,
        text=True,
        timeout=60,
    )
    assert done.returncode == 0, done.stderr
    spans = json.loads("[" + done.stdout.strip().replace("}\n{", "},{") + "]")
    assert sorted(s["name"] for s in spans) == ["pyworkflow.start", "pyworkflow.step", "pyworkflow.turn"]
    assert (tmp_path / "traced.db").exists()
