"""Over HTTP, a number the server would not keep exactly (an integer beyond 64 bits, which the
JSON reader used to turn into a float, or a literal too large for a double) is refused with 422
``validation_error`` in the one error shape, naming where, and changes nothing; the ends of the
range are kept exactly, as integers."""

from __future__ import annotations

import time
from collections.abc import AsyncIterator
from typing import Any

import httpx
import pytest
from atfg_harness import ServerProcess, database_dump

import pyworkflow

BIG = "18446744073709551617"  # 2**64 + 1
BELOW = "-9223372036854775809"  # -2**63 - 1


@pyworkflow.workflow(name="exact-numbers:ledger")
async def ledger() -> Any:
    return await pyworkflow.hook("operator_answer")


def settled_dump(server: ServerProcess) -> str:
    """:func:`database_dump` once it stayed the same for longer than the notifier's poll."""
    previous, deadline = database_dump(server), time.monotonic() + 20
    while time.monotonic() < deadline:
        time.sleep(0.7)
        current = database_dump(server)
        if current == previous:
            return current
        previous = current
    raise AssertionError("the database kept changing with nothing sent to the server")


@pytest.fixture
async def parked(server: ServerProcess) -> AsyncIterator[tuple[str, str]]:
    """A pyworkflow run in the server's database, parked on a hook: (run id, hook id)."""
    pyworkflow.configure(storage=server.storage_url, poll_interval=0.02)
    try:
        run_id = await pyworkflow.start(ledger)
        await pyworkflow.wait_for_run(run_id, 20, until=("suspended",))
        (hook,) = [h for h in await pyworkflow.list_pending_hooks() if h.run_id == run_id]
        yield run_id, hook.hook_id
    finally:
        await pyworkflow.shutdown()


@pytest.fixture
async def http(server: ServerProcess) -> AsyncIterator[httpx.AsyncClient]:
    async with httpx.AsyncClient(base_url=server.url, headers=server.headers(), timeout=30) as c:
        yield c


async def test_every_value_a_body_carries_refuses_numbers_it_would_not_keep(
    server: ServerProcess, http: httpx.AsyncClient, parked: tuple[str, str]
) -> None:
    _, hook_id = parked
    t = (await http.post("/api/v2/traversers", json={"target": "tester.pausing"})).json()["id"]
    w = (await http.post("/api/v2/workers", json={"node_id": "n", "version": "1", "capacity": 1})).json()[
        "id"
    ]
    approval = {"traverser_id": t, "operation_key": "k0", "prompt": "p", "pause": False}
    a = (await http.post("/api/v2/approvals", json=approval)).json()["approval"]["id"]
    refused: list[tuple[str, str, str, str]] = [
        ("POST", f"/hooks/{hook_id}/resume", f'{{"payload": {{"account": {BIG}}}}}', "body.payload.account"),
        ("POST", "/traversers", f'{{"target": "tester.pausing", "input": {{"n": {BIG}}}}}', "body.input.n"),
        ("POST", f"/traversers/{t}/complete", f'{{"epoch": 1, "result": [{BELOW}]}}', "body.result[0]"),
        ("PUT", f"/traversers/{t}/checkpoints/c", '{"epoch": 1, "value": {"x": 1e400}}', "body.value.x"),
        (
            "POST",
            "/approvals",
            f'{{"traverser_id": "{t}", "operation_key": "k1", "prompt": {{"n": {BIG}}}, "pause": false}}',
            "body.prompt.n",
        ),
        ("POST", f"/approvals/{a}/decide", f'{{"decision": "approved", "response": {BIG}}}', "body.response"),
        ("PUT", "/memory/s/k", '{"value": [-1e400]}', "body.value[0]"),
        ("POST", f"/workers/{w}/heartbeat", f'{{"leases": [], "stats": {{"n": {BIG}}}}}', "body.stats.n"),
    ]
    # The server's notifier drains the outbox rows of the approval and the hook created above
    # on its own schedule (every 0.5 s): wait for the database to settle before comparing.
    before = settled_dump(server)
    for method, path, body, where in refused:
        response = await http.request(method, "/api/v2" + path, content=body.encode())
        assert response.status_code == 422, (path, response.text)
        error = response.json()["error"]
        assert set(response.json()) == {"error"} and error["code"] == "validation_error", error
        assert error["message"].startswith(f"{where}: "), error["message"]
    assert database_dump(server) == before
    assert [h["id"] for h in (await http.get("/api/v2/hooks")).json()["items"]] == [hook_id]


async def test_a_hook_payload_at_the_ends_of_the_range_reaches_the_run_exactly(
    http: httpx.AsyncClient, parked: tuple[str, str]
) -> None:
    run_id, hook_id = parked
    body = b'{"payload": {"max": 18446744073709551615, "min": -9223372036854775808, "f": 1e308}}'
    response = await http.post(f"/api/v2/hooks/{hook_id}/resume", content=body)
    assert response.status_code == 200, response.text
    run = await pyworkflow.wait_for_run(run_id, 20)
    assert run.status == "completed" and run.result == {"max": 2**64 - 1, "min": -(2**63), "f": 1e308}
    assert isinstance(run.result["max"], int) and isinstance(run.result["min"], int)
