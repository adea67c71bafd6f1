"""The graph server's database failing under it (issue 11, B.5), with real processes: the
PostgreSQL backend of a request in flight terminated (``pg_terminate_backend``), and a SQLite
file that can no longer grow (the server's RLIMIT_FSIZE lowered under it with ``prlimit``, a
disk full for that process). Each answers 503 ``database_unavailable`` with ``Retry-After`` in
the one error shape, never a 5xx of another kind; nothing half-written stays; the server
recovers by itself when the fault ends and ``PRAGMA integrity_check`` is ok.

A SQLite file locked by another process and a file deleted under the server are
tests/acceptance/atfgraph/test_atfg_database_faults.py; every connection of the server
terminated at once is test_atfg_shared_postgres.py."""

from __future__ import annotations

import resource
import sqlite3
import threading
import time
from collections.abc import Iterator
from pathlib import Path
from typing import Any

import httpx
import psycopg
import pytest
from _races_harness import scale
from atfg_harness import ServerProcess, create_pg_database, drop_pg_database

#: How long a write may wait for the database before its 503 (the server's write timeout).
WRITE_TIMEOUT = 8.0
#: Trials of each fault in make test (times RELIABILITY_SCALE).
TRIALS = 3


def api(server: ServerProcess, method: str, path: str, body: Any = None) -> httpx.Response:
    return httpx.request(
        method, server.url + "/api/v2" + path, json=body, headers=server.headers(), timeout=60
    )


def assert_unavailable(response: httpx.Response) -> None:
    assert response.status_code == 503, response.text
    assert response.json() == {
        "error": {"code": "database_unavailable", "message": response.json()["error"]["message"]}
    }
    assert response.headers["Retry-After"].isdigit(), response.headers


def eventually(fn: Any, seconds: float = 30) -> Any:
    deadline = time.monotonic() + seconds
    while True:
        try:
            return fn()
        except AssertionError:
            if time.monotonic() > deadline:
                raise
            time.sleep(0.1)


@pytest.fixture
def pg_server(tmp_path: Path) -> Iterator[ServerProcess]:
    url = create_pg_database()
    server = ServerProcess(tmp_path, db=url)
    server.env["ATFGRAPH_WRITE_TIMEOUT"] = str(WRITE_TIMEOUT)
    try:
        server.start()
        yield server
    finally:
        server.kill()
        drop_pg_database(url)


def waiting_backends(url: str) -> list[int]:
    """The server's backends blocked on a lock: its writes in flight."""
    with psycopg.connect(url, autocommit=True) as admin:
        rows = admin.execute(
            "SELECT pid FROM pg_stat_activity WHERE datname = current_database()"
            " AND wait_event_type = 'Lock' AND pid <> pg_backend_pid()"
        ).fetchall()
    return [int(r[0]) for r in rows]


def test_a_postgresql_backend_terminated_mid_request_is_a_503_and_nothing_half_written(
    pg_server: ServerProcess,
) -> None:
    server = pg_server
    for trial in range(TRIALS * scale()):
        answers: list[httpx.Response] = []
        body = {"target": "tester.echo", "input": {"trial": trial}}
        with psycopg.connect(server.db) as holder:  # a transaction: writes wait behind it
            holder.execute("LOCK TABLE runs IN EXCLUSIVE MODE")
            request = threading.Thread(
                target=lambda out=answers, b=body: out.append(api(server, "POST", "/traversers", b))
            )
            request.start()
            blocked = eventually(
                lambda: waiting_backends(server.db) or (_ for _ in ()).throw(AssertionError())
            )
            with psycopg.connect(server.db, autocommit=True) as admin:
                for pid in blocked:  # the backend of the request in flight, mid-transaction
                    admin.execute("SELECT pg_terminate_backend(%s)", (pid,))
            request.join(60)
            holder.rollback()
        (answer,) = answers
        assert_unavailable(answer)
        # the server reconnects by itself; the refused write left nothing behind
        eventually(lambda: _expect(api(server, "POST", "/traversers", {"target": "tester.echo"}), 201))
        items = api(server, "GET", "/traversers?status=queued", None).json()["items"]
        assert len(items) == trial + 1, items  # one per trial: the one that answered 201
        assert not [t for t in items if t["input"] == {"trial": trial}], items
    assert "Traceback" not in server.log.read_text(errors="replace")


def _expect(response: httpx.Response, status: int) -> httpx.Response:
    assert response.status_code == status, response.text
    return response


@pytest.fixture
def sqlite_server(tmp_path: Path) -> Iterator[ServerProcess]:
    server = ServerProcess(tmp_path, db=str(tmp_path / "graph.db"))
    server.env["ATFGRAPH_WRITE_TIMEOUT"] = "2"
    server.start()
    yield server
    server.kill()


def integrity(path: Path) -> str:
    conn = sqlite3.connect(path)
    try:
        return str(conn.execute("PRAGMA integrity_check").fetchone()[0])
    finally:
        conn.close()


def test_a_full_disk_under_a_sqlite_server_is_a_503_then_it_recovers(sqlite_server: ServerProcess) -> None:
    server = sqlite_server
    assert server.proc is not None
    pid = server.proc.pid
    value = {"blob": "x" * 300_000}
    for trial in range(TRIALS * scale()):
        assert api(server, "PUT", f"/memory/disk/before-{trial}", {"value": {"n": trial}}).status_code == 200
        sizes = [p.stat().st_size for p in server.home.iterdir() if p.is_file()]
        limit = max(sizes) + 64 * 1024  # the files may not grow past this: a full disk
        resource.prlimit(pid, resource.RLIMIT_FSIZE, (limit, resource.RLIM_INFINITY))  # the soft limit
        try:
            refused = 0
            for n in range(4):
                answer = api(server, "PUT", f"/memory/disk/big-{trial}-{n}", {"value": value})
                if answer.status_code != 200:
                    assert_unavailable(answer)
                    refused += 1
            assert refused >= 1, "nothing hit the limit"
            assert api(server, "GET", f"/memory/disk/before-{trial}").status_code == 200  # reads answer
        finally:
            resource.prlimit(pid, resource.RLIMIT_FSIZE, (resource.RLIM_INFINITY, resource.RLIM_INFINITY))
        # the disk has room again: the server takes writes without a restart
        path = f"/memory/disk/after-{trial}"
        eventually(lambda p=path: _expect(api(server, "PUT", p, {"value": value}), 200))
        assert httpx.get(server.url + "/readyz", timeout=10).status_code == 200
    assert server.proc.poll() is None, "the server died"
    server.stop()
    assert integrity(server.db_path) == "ok"
