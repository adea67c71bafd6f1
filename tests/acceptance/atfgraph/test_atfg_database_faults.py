"""The server's database failing under it (issue 11, A.5 and A.6), with real processes: another
process holding ``BEGIN EXCLUSIVE`` on the SQLite file, the file deleted under the server, two
servers sharing one ``ATFGRAPH_HOME``, a start on a busy port, the offline recovery of an owner
token, and a PostgreSQL lock held by another connection. Each server's write timeout is short
(WRITE_TIMEOUT), so that each test takes a few seconds."""

from __future__ import annotations

import json
import sqlite3
import subprocess
import sys
import time
from collections.abc import Iterator
from pathlib import Path
from typing import Any

import httpx
import pytest
from atfg_harness import REPO, ServerProcess, WorkerProcess, create_pg_database, drop_pg_database

#: The servers' write timeout here, in seconds.
WRITE_TIMEOUT = 0.5
#: An answer to a write the database cannot take comes within this many seconds (the timeout,
#: plus the slack of a loaded machine).
ANSWERED_WITHIN = WRITE_TIMEOUT + 4.0

#: Another process holding the file's write lock until its stdin closes.
HOLD_LOCK = """
import sqlite3, sys
conn = sqlite3.connect(sys.argv[1], isolation_level=None)
conn.execute("BEGIN EXCLUSIVE")
print("locked", flush=True)
sys.stdin.read()
conn.execute("ROLLBACK")
"""


def sqlite_server(home: Path, name: str = "graph.db") -> ServerProcess:
    """A server on a SQLite file in ``home`` (on either test backend), with the short timeout."""
    home.mkdir(parents=True, exist_ok=True)
    server = ServerProcess(home, db=str(home / name))
    server.env["ATFGRAPH_WRITE_TIMEOUT"] = str(WRITE_TIMEOUT)
    return server


@pytest.fixture
def sqlite_home(tmp_path: Path) -> Iterator[ServerProcess]:
    server = sqlite_server(tmp_path)
    server.start()
    yield server
    server.close()


def api(
    server: ServerProcess, method: str, path: str, body: Any = None, token: str | None = None
) -> httpx.Response:
    headers = {"Authorization": f"Bearer {token or server.token()}"}
    return httpx.request(method, server.url + "/api/v2" + path, json=body, headers=headers, timeout=30)


def submit(server: ServerProcess, token: str | None = None) -> httpx.Response:
    return api(server, "POST", "/traversers", {"target": "tester.echo", "input": {}}, token)


def ready(server: ServerProcess) -> httpx.Response:
    return httpx.get(server.url + "/readyz", timeout=30)


def assert_unavailable(response: httpx.Response, started: float) -> None:
    assert response.status_code == 503, response.text
    assert response.json()["error"]["code"] == "database_unavailable", response.text
    assert response.headers["Retry-After"] == "1"
    assert time.monotonic() - started < ANSWERED_WITHIN, time.monotonic() - started


def pending_approval(server: ServerProcess) -> str:
    """A traverser parked on an approval; its approval's id."""
    created = api(server, "POST", "/traversers", {"target": "tester.pausing", "input": {"key": "k"}})
    assert created.status_code == 201, created.text
    deadline = time.monotonic() + 30
    while time.monotonic() < deadline:
        items = api(server, "GET", "/approvals", None).json()["items"]
        mine = [a for a in items if a["traverser_id"] == created.json()["id"]]
        if mine:
            return str(mine[0]["id"])
        time.sleep(0.05)
    raise AssertionError("the traverser never asked for its approval")


def test_a_lock_held_by_another_process_answers_503_within_the_write_timeout(
    sqlite_home: ServerProcess,
) -> None:
    server = sqlite_home
    worker = WorkerProcess(server, "atfg_agents:app").start()
    try:
        approval = pending_approval(server)
        minted = api(server, "POST", "/tokens", {"name": "ana", "role": "reviewer"})
        reviewer = minted.json()["token"]
        holder = subprocess.Popen(
            [sys.executable, "-c", HOLD_LOCK, str(server.db_path)],
            stdin=subprocess.PIPE,
            stdout=subprocess.PIPE,
            text=True,
        )
        try:
            assert holder.stdout is not None and holder.stdout.readline().strip() == "locked"
            started = time.monotonic()
            assert_unavailable(submit(server), started)
            started = time.monotonic()
            decided = api(server, "POST", f"/approvals/{approval}/decide", {"decision": "approved"})
            assert_unavailable(decided, started)
            started = time.monotonic()
            assert_unavailable(ready(server), started)
            assert api(server, "GET", "/traversers", None).status_code == 200  # reads still answer
            # ... also for a token used for the first time (its use is recorded beside the read)
            assert api(server, "GET", "/approvals", None, reviewer).status_code == 200
        finally:
            assert holder.stdin is not None and holder.stdout is not None
            holder.stdin.close()
            holder.wait(10)
            holder.stdout.close()
        assert ready(server).status_code == 200
        assert submit(server).status_code == 201
        decided = api(server, "POST", f"/approvals/{approval}/decide", {"decision": "approved"})
        assert decided.status_code == 200, decided.text
        assert decided.json()["status"] == "approved"
    finally:
        worker.kill()


def test_a_database_file_deleted_under_the_server_is_noticed(sqlite_home: ServerProcess) -> None:
    server = sqlite_home
    owner = server.token()
    credentials = (server.home / "credentials.json").read_text()
    assert submit(server).status_code == 201
    for suffix in ("", "-wal", "-shm"):
        Path(f"{server.db_path}{suffix}").unlink(missing_ok=True)
    started = time.monotonic()
    answer = ready(server)
    assert_unavailable(answer, started)
    assert "deleted" in answer.json()["error"]["message"]
    started = time.monotonic()
    assert_unavailable(submit(server), started)
    assert "deleted" in server.log.read_text()  # the refusals are logged too

    # Restarted on the missing file: a new, empty database with credentials of its own; the
    # old database's credentials are left as they were (a restored backup still opens with them).
    server.stop()
    server.start()
    assert (server.home / "credentials.json").read_text() == credentials
    fresh = [p for p in server.home.glob("credentials-*.json")]
    assert len(fresh) == 1, fresh
    data = json.loads(fresh[0].read_text())
    assert data["database"] == str(server.db_path)
    assert submit(server, token=data["owner"]).status_code == 201
    assert submit(server, token=owner).status_code == 401
    assert "belongs to another database" in server.log.read_text()


def test_a_second_server_with_the_same_home_keeps_the_firsts_credentials(tmp_path: Path) -> None:
    first = sqlite_server(tmp_path, "first.db")
    second = sqlite_server(tmp_path, "second.db")
    try:
        first.start()
        credentials = (tmp_path / "credentials.json").read_text()
        assert json.loads(credentials)["database"] == str(tmp_path / "first.db")
        second.start()
        assert (tmp_path / "credentials.json").read_text() == credentials
        assert submit(first).status_code == 201  # the owner of the first still gets in
        (theirs,) = tmp_path.glob("credentials-*.json")
        data = json.loads(theirs.read_text())
        assert data["database"] == str(tmp_path / "second.db")
        assert oct(theirs.stat().st_mode & 0o777) == "0o600"
        assert submit(second, token=data["owner"]).status_code == 201
        assert submit(second).status_code == 401  # the first's token is not the second's
        assert not list(tmp_path.glob("*.tmp")) and not list(tmp_path.glob(".*.tmp"))
    finally:
        first.close()
        second.close()


def token_count(path: Path) -> int:
    conn = sqlite3.connect(path)
    try:
        return int(conn.execute("SELECT COUNT(*) FROM atfg_tokens").fetchone()[0])
    finally:
        conn.close()


def test_a_start_on_a_busy_port_mints_and_writes_no_credentials(sqlite_home: ServerProcess) -> None:
    server = sqlite_home
    credentials = (server.home / "credentials.json").read_text()
    other_db = server.home / "other.db"
    done = subprocess.run(
        [sys.executable, "-m", "atfgraph.server", "--port", str(server.port), "--db", str(other_db)],
        cwd=REPO,
        env=server.env,
        capture_output=True,
        text=True,
        timeout=60,
    )
    assert done.returncode != 0, done.stderr
    assert "address already in use" in done.stderr.lower(), done.stderr
    assert (server.home / "credentials.json").read_text() == credentials
    assert not list(server.home.glob("credentials-*.json"))
    assert token_count(other_db) == 0  # nothing minted that nobody could use
    assert submit(server).status_code == 201


def atfg(*args: str, env: dict[str, str]) -> subprocess.CompletedProcess[str]:
    return subprocess.run(
        [sys.executable, "-m", "atfgraph.cli", *args],
        cwd=REPO,
        env=env,
        capture_output=True,
        text=True,
        timeout=60,
    )


def test_an_owner_locked_out_mints_a_token_offline(sqlite_home: ServerProcess) -> None:
    server = sqlite_home
    (server.home / "credentials.json").unlink()  # the owner's credentials are lost
    env = {k: v for k, v in server.env.items() if k != "ATFGRAPH_TOKEN"}
    done = atfg("tokens", "create", "rescue", "--role", "owner", "--db", str(server.db_path), env=env)
    assert done.returncode == 0, done.stderr
    token = done.stdout.strip()
    assert token.startswith("atfg_") and "created token" in done.stderr
    listed = api(server, "GET", "/tokens", None, token)  # the running server accepts it at once
    assert listed.status_code == 200, listed.text
    rescue = [t for t in listed.json()["items"] if t["name"] == "rescue"]
    assert rescue and rescue[0]["role"] == "owner" and rescue[0]["created_by"].startswith("offline:")
    trail = api(server, "GET", "/audit", None, token).json()["items"]
    assert any(e["action"] == "token.create" and e["detail"].get("offline") for e in trail)

    missing = server.home / "missing.db"
    done = atfg("tokens", "create", "x", "--role", "owner", "--db", str(missing), env=env)
    assert done.returncode == 2 and "no database file" in done.stderr, done.stderr
    assert not missing.exists()
    done = atfg("tokens", "create", "x", "--role", "owner", "--db", "mysql://nope", env=env)
    assert done.returncode == 2 and "--db" in done.stderr, done.stderr


def test_a_postgres_lock_held_by_another_connection_is_a_503_not_a_500(tmp_path: Path) -> None:
    import psycopg

    url = create_pg_database()
    server = ServerProcess(tmp_path, db=url)
    server.env["ATFGRAPH_WRITE_TIMEOUT"] = str(WRITE_TIMEOUT)
    try:
        server.start()
        assert submit(server).status_code == 201
        with psycopg.connect(url) as other:  # a transaction: the lock is held until it ends
            other.execute("LOCK TABLE runs IN EXCLUSIVE MODE")  # blocks writes, not reads
            started = time.monotonic()
            assert_unavailable(submit(server), started)
            assert api(server, "GET", "/traversers", None).status_code == 200
            other.rollback()
        assert submit(server).status_code == 201
        assert ready(server).status_code == 200
    finally:
        server.kill()
        drop_pg_database(url)


@pytest.mark.parametrize(
    ("flag", "env"), [(["--write-timeout", "0"], {}), ([], {"ATFGRAPH_WRITE_TIMEOUT": "soon"})]
)
def test_a_bad_write_timeout_is_one_line_and_status_2(
    tmp_path: Path, flag: list[str], env: dict[str, str]
) -> None:
    server = sqlite_server(tmp_path)
    done = subprocess.run(
        [
            sys.executable,
            "-m",
            "atfgraph.server",
            "--port",
            str(server.port),
            "--db",
            str(server.db_path),
            *flag,
        ],
        cwd=REPO,
        env={**server.env, **env},
        capture_output=True,
        text=True,
        timeout=60,
    )
    assert done.returncode == 2, done.stderr
    assert done.stderr.startswith("atfgraph: ") and "write_timeout" in done.stderr.lower().replace(
        " ", "_"
    ), done.stderr
    assert len(done.stderr.strip().splitlines()) == 1, done.stderr
    assert not server.db_path.exists()
