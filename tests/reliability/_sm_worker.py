"""A second process of the stateful property test: ``python _sm_worker.py STORAGE OFFSET
FOLDER KEY``. Its engine clock is the system's plus OFFSET seconds (the test's clock); it starts
``machine_flow(KEY, FOLDER)``, prints ``started <run id>`` and serves runs until it is killed
(SIGKILL) or frozen (SIGSTOP)."""

from __future__ import annotations

import asyncio
import sys
import time

import _sm_flows

import pyworkflow
from pyworkflow import _clock


async def main(storage: str, key: str, folder: str) -> None:
    pyworkflow.configure(storage=storage, poll_interval=0.02, lease_ttl=30.0)
    run_id = await pyworkflow.start(_sm_flows.machine_flow, key, folder)
    print(f"started {run_id}", flush=True)
    await pyworkflow.serve()


if __name__ == "__main__":
    offset = float(sys.argv[2])
    _clock.set_clock(lambda: time.time() + offset)
    asyncio.run(main(sys.argv[1], sys.argv[4], sys.argv[3]))
