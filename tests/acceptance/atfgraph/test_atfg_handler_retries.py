"""A handler's own calls to the server ride out a server restart while its lease is valid, and
fail the attempt only when the lease is lost: a real server SIGKILLed and started again on the
same port and database while the handler's save_checkpoint is in flight."""

from __future__ import annotations

import asyncio
import time
from collections.abc import Iterator
from pathlib import Path

import pytest
from atfg_harness import ServerProcess, WorkerProcess, wait_until

from atfgraph import Client, RevisionConflictError, TraverserFailedError
from atfgraph._agent import _own_write
from atfgraph._context import TraversalContext, _Attempt
from atfgraph._transport import Transport


def _server(home: Path, lease_seconds: float) -> ServerProcess:
    server = ServerProcess(home)
    server.env["ATFGRAPH_LEASE_SECONDS"] = str(lease_seconds)
    server.start()
    return server


@pytest.fixture
def long_lease_server(tmp_path: Path) -> Iterator[ServerProcess]:
    # Longer than a restart takes on a loaded machine: the lease outlives the outage.
    server = _server(tmp_path, 30.0)
    yield server
    server.close()


@pytest.fixture
def short_lease_server(tmp_path: Path) -> Iterator[ServerProcess]:
    server = _server(tmp_path, 1.5)
    yield server
    server.close()


async def _held_at_the_gate(server: ServerProcess, client: Client, gate: Path) -> tuple[str, WorkerProcess]:
    """A worker running checkpoint_across_restart, stopped at its gate after its first save."""
    worker = WorkerProcess(server, "atfg_agents:app").start()
    handle = await client.submit("tester.checkpoint_across_restart", {"gate": str(gate)}, max_attempts=1)
    deadline = time.monotonic() + 20
    while True:
        try:
            if (await client.get_checkpoint(handle.id, "c")).revision == 1:
                return handle.id, worker
        except Exception:
            if time.monotonic() > deadline:
                raise
        assert time.monotonic() < deadline, "the handler never saved its first checkpoint"
        await asyncio.sleep(0.05)


def _retrying(worker: WorkerProcess) -> bool:
    return "checkpoints/c" in worker.output() and "retrying under the lease" in worker.output()


async def test_a_handlers_save_checkpoint_survives_a_server_restart_within_its_lease(
    long_lease_server: ServerProcess, tmp_path: Path
) -> None:
    server = long_lease_server
    gate = tmp_path / "gate"
    async with Client(server.url) as client:
        ident, worker = await _held_at_the_gate(server, client, gate)
        try:
            server.kill()  # SIGKILL: nothing of the server's shutdown runs
            gate.touch()  # the handler now calls save_checkpoint against the dead server ...
            wait_until(lambda: _retrying(worker), 20, "the handler's save_checkpoint never retried")
            server.start()  # ... and the same call succeeds once it is back on the same port
            info = await client.wait(ident, timeout=30)
            assert info.status == "succeeded", info
            assert info.result == {"first": 1, "second": 2, "attempt": 1}
            saved = await client.get_checkpoint(ident, "c")
            assert (saved.value, saved.revision) == ({"step": 2}, 2)
            assert (await client.get_memory("restart", ident)).value == {"saved": 2}
        finally:
            worker.kill()


async def test_the_attempt_fails_as_before_when_the_lease_is_lost_meanwhile(
    short_lease_server: ServerProcess, tmp_path: Path
) -> None:
    server = short_lease_server
    gate = tmp_path / "gate"
    async with Client(server.url) as client:
        ident, worker = await _held_at_the_gate(server, client, gate)
        try:
            server.kill()
            down_at = time.monotonic()
            gate.touch()
            wait_until(lambda: _retrying(worker), 20, "the handler's save_checkpoint never retried")
            # The lease (1.5 s, last extended before the kill) runs out while the server is down;
            # its first sweep on start reaps it: no attempts left, the traverser fails.
            wait_until(lambda: time.monotonic() > down_at + 3.0, 10, "unreachable")
            server.start()
            with pytest.raises(TraverserFailedError) as failed:
                await client.handle(ident).result(timeout=30)
            assert failed.value.status == "failed"
            assert failed.value.error is not None and failed.value.error.code == "lease_expired"
            # The handler stopped at the refused call: its second save never happened.
            saved = await client.get_checkpoint(ident, "c")
            assert (saved.value, saved.revision) == ({"step": 1}, 1)
            wait_until(
                lambda: (server.workers("tester")[0]["stats"] or {}).get("lost") == 1,
                20,
                "the worker never counted the lost lease",
            )
        finally:
            worker.kill()


async def test_a_refused_retry_of_a_compare_and_set_write_finds_its_own_commit(
    long_lease_server: ServerProcess,
) -> None:
    """When a write's first request committed but its answer was lost (the server died), the
    retry is refused as stale; the stored value, its own at expected_revision + 1, settles it."""
    server = long_lease_server
    transport = Transport(server.url, token=server.token("worker"), kind="worker")
    try:
        worker = await transport.request(
            "POST", "/workers", {"node_id": "cas", "version": "1", "capacity": 1}
        )
        async with Client(server.url) as client:
            handle = await client.submit("cas.run")
        [task] = (await transport.request("POST", f"/workers/{worker['id']}/claim", {"max": 1}))["tasks"]
        context = TraversalContext(handle.id, "cas.run", "cas", "1", 1, 3, task["epoch"], worker["id"])
        attempt = _Attempt(context, transport, {}, {}, {})
        path = f"/traversers/{handle.id}/checkpoints/c"
        body = attempt.leased(value={"v": 1}, expected_revision=0)
        assert (await attempt.call("PUT", path, body))["revision"] == 1  # the request that committed
        with pytest.raises(RevisionConflictError) as refused:
            await attempt.call("PUT", path, body)  # its retry
        settled = await _own_write(attempt, refused.value, path, attempt.lease(), {"v": 1}, 0)
        assert (settled["value"], settled["revision"]) == ({"v": 1}, 1)
        # Not its own write: another value, or the stored revision is not the one it would make.
        for value, expected in (({"v": 2}, 0), ({"v": 1}, 1)):
            with pytest.raises(RevisionConflictError):
                await _own_write(attempt, refused.value, path, attempt.lease(), value, expected)
    finally:
        await transport.aclose()
