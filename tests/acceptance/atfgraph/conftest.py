from __future__ import annotations

from collections.abc import AsyncIterator, Callable, Iterator
from pathlib import Path

import pytest
from atfg_harness import ServerProcess, WorkerProcess

from atfgraph import Client


@pytest.fixture
def server(tmp_path: Path) -> Iterator[ServerProcess]:
    proc = ServerProcess(tmp_path)
    proc.start()
    yield proc
    proc.kill()


@pytest.fixture
def spawn_worker(server: ServerProcess) -> Iterator[Callable[..., WorkerProcess]]:
    started: list[WorkerProcess] = []

    def spawn(
        module: str = "atfg_agents:app", *args: str, env: dict[str, str] | None = None
    ) -> WorkerProcess:
        worker = WorkerProcess(server, module, *args, env=env).start()
        started.append(worker)
        return worker

    yield spawn
    for worker in started:
        worker.kill()


@pytest.fixture
async def client(server: ServerProcess) -> AsyncIterator[Client]:
    async with Client(server.url) as c:
        yield c
