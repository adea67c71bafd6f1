"""PostgreSQL restarted under running processes, as a maintenance restart does it (``pg_ctl
restart -m fast`` of a cluster of the test's own, not the shared server): the server ends every
connection each process holds while it sits idle. Once PostgreSQL is back, the pyworkflow
runtime and the graph server carry on without an error: a suspended run is resumed and
completes, a traverser waiting on an approval is decided at the first try and finishes, new work
starts, and the server is ready at once. Before, the first statement on each connection failed,
and the end of a suspended turn lost on its way left the run leased for 30 s: the runtime's test
fails on that code (``resume_hook`` raised ``AdminShutdown``, or the run stayed suspended); the graph
server's passes there too, its sweeper's ticks meeting the ended connections before the test's
requests do (the deterministic case, connections ended and a request at once, is
tests/acceptance/atfgraph/test_atfg_shared_postgres.py). A connection lost under a statement in
flight is tests/reliability/test_db_faults.py."""

from __future__ import annotations

import asyncio
from collections.abc import Iterator
from pathlib import Path
from typing import Any

import pytest
from atfg_harness import ServerProcess, WorkerProcess
from atfg_waits import carries_on_after
from tests.own_postgres import OwnPostgres, own_postgres

import pyworkflow
from pyworkflow import resume_hook, start, step, step_hook, wait_for_run, workflow

TOKENS: list[str] = []


@step
async def ask(question: str) -> Any:
    return await step_hook("answer", on_created=TOKENS.append)


@workflow(name="tests.restart.asking")
async def asking(question: str) -> Any:
    return {"question": question, "answer": await ask(question)}


@pytest.fixture(scope="module")
def cluster() -> Iterator[OwnPostgres]:
    with own_postgres() as pg:
        yield pg


async def test_the_runtime_carries_on_through_a_restart(cluster: OwnPostgres) -> None:
    pyworkflow.configure(storage=cluster.database("runtime"))
    try:
        first = await start(asking, "before")
        await wait_for_run(first, 20, until=("suspended",))
        # At once: the end of the suspended turn may still be on its way (it rides with a later
        # statement, or goes alone a moment later); lost with its connection, it is sent again.
        await asyncio.to_thread(cluster.restart)
        await resume_hook(TOKENS[-1], "yes")  # the first call after the restart
        run = await wait_for_run(first, 20)
        assert (run.status, run.result) == ("completed", {"question": "before", "answer": "yes"})
        second = await start(asking, "after")
        await wait_for_run(second, 20, until=("suspended",))
        await resume_hook(TOKENS[-1], "again")
        run = await wait_for_run(second, 20)
        assert (run.status, run.result) == ("completed", {"question": "after", "answer": "again"})
    finally:
        await pyworkflow.shutdown()


async def test_the_graph_server_and_its_worker_carry_on_through_a_restart(
    cluster: OwnPostgres, tmp_path: Path
) -> None:
    server = ServerProcess(tmp_path, db=cluster.database("graph"))
    worker: WorkerProcess | None = None
    try:
        server.start()
        worker = WorkerProcess(server, "atfg_agents:app").start()
        await carries_on_after(server, lambda: asyncio.to_thread(cluster.restart))
    finally:
        if worker is not None:
            worker.kill()
        server.kill()
