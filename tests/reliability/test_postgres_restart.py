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
import glob
import os
import shutil
import socket
import subprocess
import tempfile
from collections.abc import Callable, Iterator
from pathlib import Path
from typing import Any

import psycopg
import pytest
from atfg_harness import ServerProcess, WorkerProcess
from atfg_waits import carries_on_after

import pyworkflow
from pyworkflow import resume_hook, start, step, step_hook, wait_for_run, workflow

TOKENS: list[str] = []


@step
async def ask(question: str) -> Any:
    return await step_hook("answer", on_created=TOKENS.append)


@workflow(name="tests.restart.asking")
async def asking(question: str) -> Any:
    return {"question": question, "answer": await ask(question)}


def _major(bindir: str) -> int:
    name = Path(bindir).parent.name
    return int(name) if name.isdigit() else 0


def _binaries() -> tuple[str, str]:
    """initdb and pg_ctl: Debian keeps them out of PATH, under /usr/lib/postgresql/<major>/bin
    (the newest major is taken); elsewhere they are on PATH."""
    for bindir in sorted(glob.glob("/usr/lib/postgresql/*/bin"), key=_major, reverse=True):
        initdb, pg_ctl = Path(bindir, "initdb"), Path(bindir, "pg_ctl")
        if initdb.exists() and pg_ctl.exists():
            return str(initdb), str(pg_ctl)
    on_path = shutil.which("initdb"), shutil.which("pg_ctl")
    if on_path[0] is None or on_path[1] is None:
        pytest.fail("PostgreSQL's initdb and pg_ctl are missing (Debian package: postgresql)", pytrace=False)
    return on_path[0], on_path[1]


def _free_port() -> int:
    with socket.socket() as sock:
        sock.bind(("127.0.0.1", 0))
        port: int = sock.getsockname()[1]
        return port


@pytest.fixture(scope="module")
def own_postgres() -> Iterator[tuple[str, Callable[[], None]]]:
    """A PostgreSQL cluster of this module's own on a free port (the URL of its ``postgres``
    database), and a function that restarts it the way an operator does (fast shutdown, then
    start, waiting until it accepts connections)."""
    initdb, pg_ctl = _binaries()
    # PostgreSQL refuses to run as root: as root, the cluster is the postgres user's.
    as_owner = ["runuser", "-u", "postgres", "--"] if os.geteuid() == 0 else []
    data = Path(tempfile.mkdtemp(prefix="pyworkflow-own-pg-"))
    if as_owner:
        shutil.chown(data, "postgres", "postgres")

    def run(*argv: str) -> None:
        proc = subprocess.run([*as_owner, *argv], capture_output=True, text=True, timeout=120)
        assert proc.returncode == 0, f"{argv}: {proc.stdout}{proc.stderr}"

    port = _free_port()
    options = f"-p {port} -c listen_addresses=127.0.0.1 -k {data} -c fsync=off -c full_page_writes=off"
    try:
        run(initdb, "-D", str(data / "db"), "-A", "trust", "-U", "postgres", "-E", "UTF8", "--no-sync")
        run(pg_ctl, "-D", str(data / "db"), "-l", str(data / "log"), "-o", options, "-w", "start")
        yield (
            f"postgresql://postgres@127.0.0.1:{port}/postgres",
            lambda: run(
                pg_ctl, "-D", str(data / "db"), "-l", str(data / "log"), "-m", "fast", "-w", "restart"
            ),
        )
    finally:
        subprocess.run([*as_owner, pg_ctl, "-D", str(data / "db"), "-m", "immediate", "stop"],
                       capture_output=True, timeout=60)  # fmt: skip
        shutil.rmtree(data, ignore_errors=True)


async def test_the_runtime_carries_on_through_a_restart(own_postgres: tuple[str, Callable[[], None]]) -> None:
    url, restart = own_postgres
    pyworkflow.configure(storage=url)
    try:
        first = await start(asking, "before")
        await wait_for_run(first, 20, until=("suspended",))
        # At once: the end of the suspended turn may still be on its way (it rides with a later
        # statement, or goes alone a moment later); lost with its connection, it is sent again.
        await asyncio.to_thread(restart)
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
    own_postgres: tuple[str, Callable[[], None]], tmp_path: Path
) -> None:
    url, restart = own_postgres
    with psycopg.connect(url, autocommit=True) as admin:
        admin.execute("CREATE DATABASE graph")
    server = ServerProcess(tmp_path, db=url.rsplit("/", 1)[0] + "/graph")
    worker: WorkerProcess | None = None
    try:
        server.start()
        worker = WorkerProcess(server, "atfg_agents:app").start()
        await carries_on_after(server, lambda: asyncio.to_thread(restart))
    finally:
        if worker is not None:
            worker.kill()
        server.kill()
