from __future__ import annotations

from collections.abc import AsyncIterator, Callable, Iterator
from pathlib import Path

import pytest
from atfg_console import launch_browser
from atfg_harness import ServerProcess, WorkerProcess
from playwright.async_api import Browser

from atfgraph import Client


@pytest.fixture(autouse=True)
def _credentials_home(tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> None:
    """Clients in the test process find the credentials the test's server writes on first start
    (its data directory is tmp_path), as clients on a user's machine find a local server's."""
    monkeypatch.setenv("ATFGRAPH_HOME", str(tmp_path))
    monkeypatch.delenv("ATFGRAPH_TOKEN", raising=False)


@pytest.fixture
def server(tmp_path: Path) -> Iterator[ServerProcess]:
    proc = ServerProcess(tmp_path)
    proc.start()
    yield proc
    proc.close()


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


@pytest.fixture
async def browser() -> AsyncIterator[Browser]:
    async for launched in launch_browser():
        yield launched
