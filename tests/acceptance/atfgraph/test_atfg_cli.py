"""The command line: `atfg server start` / `python -m atfgraph.server`, and `atfg ps`."""

from __future__ import annotations

import json
import subprocess
import sys
from collections.abc import Callable
from pathlib import Path

import httpx
import pytest
from atfg_harness import REPO, ServerProcess, WorkerProcess, base_env, free_port, wait_until
from atfg_waits import reach

from atfgraph import Client


def _ready(url: str) -> bool:
    try:
        return httpx.get(url + "/readyz", timeout=1).status_code == 200
    except httpx.HTTPError:
        return False


@pytest.mark.parametrize("how", ["atfg", "module"])
def test_server_start_commands(tmp_path: Path, how: str) -> None:
    port = free_port()
    url = f"http://127.0.0.1:{port}"
    db = tmp_path / "cli.db"
    if how == "atfg":
        argv = [
            str(Path(sys.executable).parent / "atfg"),
            "server",
            "start",
            "--port",
            str(port),
            "--db",
            str(db),
        ]
    else:
        argv = [sys.executable, "-m", "atfgraph.server", "--port", str(port), "--db", str(db)]
    proc = subprocess.Popen(argv, cwd=REPO, env=base_env(url, tmp_path), stderr=subprocess.PIPE)
    try:
        wait_until(lambda: _ready(url), 20, "the server never became ready")
        assert httpx.get(url + "/livez").json() == {"status": "ok"}
        assert db.exists()
    finally:
        proc.terminate()
        _, err = proc.communicate(timeout=15)
    # uvicorn shuts down gracefully, then re-raises SIGTERM so the exit status tells the truth.
    assert proc.returncode in (0, -15), err.decode()
    assert "Traceback" not in err.decode()
    assert f"atfgraph server on {url}" in err.decode()


def test_home_directory_default(tmp_path: Path) -> None:
    port = free_port()
    url = f"http://127.0.0.1:{port}"
    env = base_env(url, tmp_path / "home")
    proc = subprocess.Popen([sys.executable, "-m", "atfgraph.server", "--port", str(port)], cwd=REPO, env=env)
    try:
        wait_until(lambda: _ready(url), 20, "the server never became ready")
        assert (tmp_path / "home" / "atfgraph.db").exists()
    finally:
        proc.terminate()
        proc.wait(15)


async def test_atfg_ps_lists_waiting_traversers(
    server: ServerProcess, spawn_worker: Callable[..., WorkerProcess], client: Client
) -> None:
    spawn_worker()
    handle = await client.submit("tester.pausing", {"key": "ps"})
    info = await reach(client, handle.id, "waiting")
    atfg = str(Path(sys.executable).parent / "atfg")
    table = subprocess.run([atfg, "ps"], env=server.env, capture_output=True, text=True, timeout=30)
    assert table.returncode == 0, table.stderr
    [row] = [line for line in table.stdout.splitlines() if line.startswith(handle.id)]
    assert row.split() == [handle.id, "tester.pausing", "waiting", "1", str(info.waiting_on)]
    lines = subprocess.run(
        [atfg, "ps", "-o", "jsonl", "--server", server.url], capture_output=True, text=True, timeout=30
    ).stdout.splitlines()
    assert [json.loads(line)["id"] for line in lines] == [handle.id]
    done = subprocess.run(
        [atfg, "ps", "--status", "succeeded", "-o", "json"], env=server.env, capture_output=True, text=True
    )
    assert json.loads(done.stdout) == []
