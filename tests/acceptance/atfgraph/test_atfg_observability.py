"""Metrics and logs of a real graph server and worker: ``/metrics`` scraped after an approval
cycle (values checked against the database), its authorization and the separate unauthenticated
``--metrics-bind`` address, JSON logs with one INFO record per transition, and no secret in any
log line of the cycle."""

from __future__ import annotations

import json
import sqlite3
from collections.abc import Iterator
from pathlib import Path
from typing import Any

import httpx
import pytest
from atfg_harness import (
    ON_POSTGRES,
    ServerProcess,
    WorkerProcess,
    create_pg_database,
    drop_pg_database,
    free_port,
    wait_until,
)
from atfg_waits import only_approval, reach
from prometheus_client.parser import text_string_to_metric_families

from atfgraph import Client

#: A password the database URL carries (PostgreSQL's trust authentication ignores it): it must
#: never reach a log line.
DB_PASSWORD = "pw-not-for-logs-7d1c"

#: The workers a test started (killed when its server stops).
STARTED: list[WorkerProcess] = []

Samples = dict[tuple[str, frozenset[tuple[str, str]]], float]


def parse(text: str) -> Samples:
    return {
        (s.name, frozenset(s.labels.items())): s.value
        for family in text_string_to_metric_families(text)
        for s in family.samples
    }


def value(samples: Samples, name: str, **labels: str) -> float:
    return samples.get((name, frozenset(labels.items())), 0.0)


def series(samples: Samples, name: str) -> list[dict[str, str]]:
    return [dict(labels) for n, labels in samples if n == name]


@pytest.fixture
def observed(tmp_path: Path) -> Iterator[tuple[ServerProcess, int]]:
    """A server logging JSON at INFO with the access log, its metrics also on a port of their own;
    on PostgreSQL its URL carries a password."""
    metrics_port = free_port()
    args = ("--log-level", "info", "--log-format", "json", "--access-log",
            "--metrics-bind", f"127.0.0.1:{metrics_port}")  # fmt: skip
    created = create_pg_database() if ON_POSTGRES else None
    db = created.replace("postgres@", f"postgres:{DB_PASSWORD}@", 1) if created else None
    server = ServerProcess(tmp_path, db=db, args=args)
    server.start()
    try:
        yield server, metrics_port
    finally:
        for worker in STARTED:
            worker.kill()
        STARTED.clear()
        server.close()
        if created is not None:
            drop_pg_database(created)


def database_counts(server: ServerProcess) -> dict[tuple[str, str], int]:
    """The oracle: runs by (status, kind) as the database holds them."""
    query = "SELECT status, node_id IS NULL, count(*) FROM runs GROUP BY status, node_id IS NULL"
    if server.on_postgres:
        import psycopg

        with psycopg.connect(server.db) as pg:
            rows = pg.execute(query).fetchall()
    else:
        conn = sqlite3.connect(server.db_path)
        try:
            rows = conn.execute(query).fetchall()
        finally:
            conn.close()
    return {(str(s), "workflow" if local else "traverser"): int(n) for s, local, n in rows}


def scrape(server: ServerProcess) -> Samples:
    response = httpx.get(server.url + "/metrics", headers=server.headers("owner"), timeout=10)
    assert response.status_code == 200, response.text
    assert response.headers["content-type"].startswith("text/plain")
    return parse(response.text)


def runs_gauge(samples: Samples) -> dict[tuple[str, str], int]:
    return {
        (dict(labels)["status"], dict(labels)["kind"]): int(v)
        for (name, labels), v in samples.items()
        if name == "pyworkflow_runs"
    }


async def test_metrics_after_an_approval_cycle_match_the_database(
    observed: tuple[ServerProcess, int],
) -> None:
    server, metrics_port = observed
    STARTED.append(WorkerProcess(server, "atfg_agents:app").start())
    async with Client(server.url) as client:
        handle = await client.submit("tester.pausing", {"key": "op-1"})
        await reach(client, handle.id, "waiting")
        # While it waits: one pending approval, the traverser suspended (engine status).
        waiting = scrape(server)
        assert value(waiting, "pyworkflow_waits_pending", kind="approval") == 1
        assert value(waiting, "pyworkflow_oldest_pending_wait_age_seconds", kind="approval") >= 0
        assert runs_gauge(waiting) == database_counts(server) == {("suspended", "traverser"): 1}
        approval = await only_approval(client, handle.id)
        await client.decide_approval(str(approval["id"]), "approved", {"ok": True})
        await handle.result(timeout=15)

    # The state gauges are read from the database (cached for a second): they come to equal it.
    wait_until(
        lambda: runs_gauge(scrape(server)) == database_counts(server) == {("completed", "traverser"): 1},
        10,
        "pyworkflow_runs never matched the database",
    )
    samples = scrape(server)
    assert value(samples, "pyworkflow_store_up") == 1
    assert value(samples, "pyworkflow_waits_pending", kind="approval") == 0
    # One decision, one attempt that ran on from it.
    assert value(samples, "pyworkflow_decision_to_running_seconds_count", kind="approval") == 1
    # Two attempts: the first paused on the approval, the continuation succeeded.
    assert value(samples, "pyworkflow_attempt_seconds_count", kind="traverser", outcome="paused") == 1
    assert value(samples, "pyworkflow_attempt_seconds_count", kind="traverser", outcome="succeeded") == 1
    assert value(samples, "pyworkflow_group_commit_batch_size_count") > 0
    assert value(samples, "pyworkflow_group_commit_seconds_count") > 0
    # HTTP durations by route template and status: the decision, the claims, the submission.
    decide = {"method": "POST", "route": "/api/v2/approvals/{id}/decide", "status": "200"}
    assert value(samples, "atfgraph_http_request_duration_seconds_count", **decide) == 1
    routes = {s["route"] for s in series(samples, "atfgraph_http_request_duration_seconds_count")}
    assert {"/api/v2/traversers", "/api/v2/workers/{id}/claim", "/readyz", "/metrics"} <= routes
    assert not any(handle.id in r or str(approval["id"]) in r for r in routes), routes
    # The process itself: its memory and CPU, and the garbage collector's passes (at the server's
    # pace a young pass every 50,000 allocations: its start-up's, a few hundred, and few since).
    assert value(samples, "process_resident_memory_bytes") > 10 * 1024 * 1024
    assert value(samples, "process_cpu_seconds_total") > 0
    assert {s["generation"] for s in series(samples, "python_gc_collections_total")} == {"0", "1", "2"}
    assert value(samples, "python_gc_collections_total", generation="0") > 0

    # The separate address answers without a token, with the same registry.
    bound = httpx.get(f"http://127.0.0.1:{metrics_port}/metrics", timeout=10)
    assert bound.status_code == 200
    assert runs_gauge(parse(bound.text)) == {("completed", "traverser"): 1}


def test_a_method_a_client_makes_up_adds_no_series(observed: tuple[ServerProcess, int]) -> None:
    """A metric keeps every series it saw: methods the API does not know (WebDAV's and the other
    methods the server's HTTP parser accepts) are counted as ``other``, so the label's values stay
    the methods the API answers; a method the parser refuses is answered by it and never counted."""
    server, _ = observed
    methods = ["PROPFIND", "MKCOL", "LOCK", "UNLOCK", "COPY", "MOVE", "SEARCH", "PURGE", "REPORT", "FROB"]
    reached = 0
    for method in methods:
        response = httpx.request(method, server.url + "/api/v2/traversers", timeout=10)
        assert response.status_code < 500, (method, response.status_code, response.text)
        if response.headers.get("content-type", "").startswith("application/json"):
            reached += 1  # the server's app answered (401: no token), not the HTTP parser
    assert reached >= 2, "hardly any of the methods reached the server's app"

    def counted_as_other(samples: Samples) -> float:
        return sum(
            v
            for (name, labels), v in samples.items()
            if name == "atfgraph_http_request_duration_seconds_count" and ("method", "other") in labels
        )

    # A request is observed once its answer went out: the last one may be a moment behind.
    wait_until(
        lambda: counted_as_other(scrape(server)) == reached, 10, "the made-up methods were not counted"
    )
    samples = scrape(server)
    seen = {s["method"] for s in series(samples, "atfgraph_http_request_duration_seconds_count")}
    assert seen <= {"GET", "HEAD", "POST", "PUT", "PATCH", "DELETE", "OPTIONS", "other"}, seen
    assert counted_as_other(samples) == reached


def test_metrics_need_an_owner_or_administrator_token(observed: tuple[ServerProcess, int]) -> None:
    server, _ = observed
    anonymous = httpx.get(server.url + "/metrics", timeout=10)
    assert anonymous.status_code == 401
    assert anonymous.json()["error"]["code"] == "unauthenticated"
    worker = httpx.get(server.url + "/metrics", headers=server.headers("worker"), timeout=10)
    assert worker.status_code == 403
    assert worker.json()["error"]["code"] == "forbidden"
    assert "administer" in worker.json()["error"]["message"]
    created = httpx.post(
        server.url + "/api/v2/tokens",
        json={"name": "ops", "role": "administrator"},
        headers=server.headers("owner"),
        timeout=10,
    )
    assert created.status_code in (200, 201), created.text
    admin = {"Authorization": f"Bearer {created.json()['token']}"}
    assert httpx.get(server.url + "/metrics", headers=admin, timeout=10).status_code == 200


def json_lines(path: Path) -> list[dict[str, Any]]:
    """The log records of a process's output (its plain ``print`` banners are not records)."""
    records = []
    for line in path.read_text().splitlines():
        if line.startswith("{") and '"level"' in line:
            records.append(json.loads(line))
    return records


async def test_logs_are_json_records_per_transition_and_hold_no_secret(
    observed: tuple[ServerProcess, int],
) -> None:
    server, _ = observed
    worker = WorkerProcess(server, "atfg_agents:app", "--log-level", "info", "--log-format", "json").start()
    STARTED.append(worker)
    async with Client(server.url) as client:
        handle = await client.submit("tester.pausing", {"key": "op-2"})
        await reach(client, handle.id, "waiting")
        approval = await only_approval(client, handle.id)
        await client.decide_approval(str(approval["id"]), "rejected", None)
        await handle.result(timeout=15)
        # A wrong secret for a real token id: refused, and the attempt is not logged verbatim.
        owner = server.token("owner")
        forged = owner[: -len("x" * 8)] + "x" * 8
        assert (
            httpx.get(server.url + "/metrics", headers={"Authorization": f"Bearer {forged}"}).status_code
            == 401
        )
    worker.terminate()
    server.stop()

    records = json_lines(server.log)
    assert records, server.log.read_text()[-2000:]
    assert {r["level"] for r in records} <= {"DEBUG", "INFO", "WARNING", "ERROR", "CRITICAL"}
    transitions = [r for r in records if r.get("run_id") == handle.id]
    messages = [r["message"] for r in transitions]
    assert f"traverser {handle.id}: queued (tester.pausing)" in messages
    running = [
        r for r in transitions if r["message"].endswith(("running (attempt 1)", "running (attempt 2)"))
    ]
    assert [r["attempt"] for r in running] == [1, 2]
    decided = [r for r in transitions if r["message"] == f"approval {approval['id']}: rejected"]
    assert len(decided) == 1 and decided[0]["wait_id"] == approval["id"] and decided[0]["level"] == "INFO"
    waiting = [r for r in transitions if "waiting on approval" in r["message"]]
    assert waiting and waiting[0]["wait_id"] == approval["id"]
    access = [r for r in records if r["logger"] == "atfgraph.access"]
    assert any(r["route"] == "/api/v2/approvals/{id}/decide" and r["status"] == 200 for r in access)

    secrets = [server.token("owner"), server.token("worker"), forged, DB_PASSWORD]
    for path in [server.log, worker.log]:
        text = path.read_text()
        for secret in secrets:
            assert secret not in text, f"{secret[:8]}... appears in {path.name}"
    if server.on_postgres:  # the URL was printed and logged, its password never
        assert "postgres:***@" in server.log.read_text()
