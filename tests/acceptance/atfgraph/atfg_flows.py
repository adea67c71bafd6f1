"""Workflows a separate pyworkflow process serves next to a graph server, for the tests that
start pyworkflow runs by name through the server (``POST /api/v2/runs``, ``atfg runs start
--workflow``, the console's form).

``python -m atfg_flows STORAGE_URL``: pyworkflow's local runtime serving that database
(``pyworkflow.serve()``) with these workflows registered; :class:`FlowsProcess` runs it."""

from __future__ import annotations

import asyncio
import signal
import subprocess
import sys
import time
from typing import Any

import pyworkflow
from pyworkflow import step, workflow


@step
async def add(a: int, b: int) -> int:
    return a + b


@workflow(name="flows:sum")
async def flows_sum(a: int, b: int, note: str = "") -> dict[str, Any]:
    """Adds two numbers in a step."""
    return {"sum": await add(a, b), "note": note}


class FlowsProcess:
    """``python -m atfg_flows`` on a server's database; its log in the server's home."""

    def __init__(self, server: Any) -> None:
        self.server = server
        self.log = server.home / f"flows-{time.monotonic_ns()}.log"
        self.proc: subprocess.Popen[bytes] | None = None

    def start(self) -> FlowsProcess:
        with open(self.log, "ab") as log:
            self.proc = subprocess.Popen(
                [sys.executable, "-m", "atfg_flows", self.server.storage_url],
                env=self.server.env,
                stdout=log,
                stderr=subprocess.STDOUT,
            )
        deadline = time.monotonic() + 30
        while "serving runs stored in" not in self.output():
            if self.proc.poll() is not None or time.monotonic() > deadline:
                raise AssertionError(f"the pyworkflow process never served; see {self.log}")
            time.sleep(0.05)
        return self

    def kill(self) -> None:
        if self.proc is not None and self.proc.poll() is None:
            self.proc.send_signal(signal.SIGKILL)
            self.proc.wait(10)

    def output(self) -> str:
        return self.log.read_text(errors="replace")


if __name__ == "__main__":
    pyworkflow.configure(storage=sys.argv[1], poll_interval=0.05)
    try:
        asyncio.run(pyworkflow.serve())
    except KeyboardInterrupt:
        pass
