"""Real processes for the acceptance tests: a graph server on a free port and a temporary SQLite
file, and workers, each a subprocess that can be SIGKILLed and started again.

With ``PYWORKFLOW_TEST_STORE=postgresql`` each server gets a new PostgreSQL database instead
(created on ``PYWORKFLOW_TEST_PG``'s server, dropped by :meth:`ServerProcess.close`)."""

from __future__ import annotations

import json
import os
import secrets
import signal
import socket
import subprocess
import sys
import time
from collections.abc import Callable
from pathlib import Path
from typing import Any
from urllib.parse import urlsplit, urlunsplit

import httpx
import pytest

REPO = Path(__file__).resolve().parents[3]
HERE = Path(__file__).resolve().parent
#: Short leases so that a killed worker's attempt is retried within seconds.
LEASE_SECONDS = 1.5
BACKEND = os.environ.get("PYWORKFLOW_TEST_STORE", "sqlite")
ON_POSTGRES = BACKEND in ("postgresql", "postgres")
PG_ADMIN_URL = os.environ.get("PYWORKFLOW_TEST_PG", "postgresql://postgres@127.0.0.1:5432/postgres")


def create_pg_database() -> str:
    """A new, empty PostgreSQL database; fails with one line if PostgreSQL is down."""
    import psycopg

    parts = urlsplit(PG_ADMIN_URL)
    name = f"atfgtest_{secrets.token_hex(6)}"
    try:
        with psycopg.connect(PG_ADMIN_URL, autocommit=True, connect_timeout=5) as conn:
            conn.execute(f'CREATE DATABASE "{name}"')
    except psycopg.OperationalError as exc:
        first = str(exc).strip().splitlines()[0]
        pytest.fail(f"PostgreSQL is not reachable at {parts.hostname}:{parts.port} ({first})", pytrace=False)
    return urlunsplit((parts.scheme, parts.netloc, f"/{name}", parts.query, parts.fragment))


def drop_pg_database(url: str) -> None:
    import psycopg

    name = urlsplit(url).path.lstrip("/")
    with psycopg.connect(PG_ADMIN_URL, autocommit=True) as conn:
        conn.execute(f'DROP DATABASE IF EXISTS "{name}" WITH (FORCE)')


def free_port() -> int:
    with socket.socket() as sock:
        sock.bind(("127.0.0.1", 0))
        port: int = sock.getsockname()[1]
        return port


def base_env(url: str, home: Path) -> dict[str, str]:
    env = dict(os.environ)
    env["ATFGRAPH_SERVER"] = url
    env["ATFGRAPH_HOME"] = str(home)
    env["ATFGRAPH_LEASE_SECONDS"] = str(LEASE_SECONDS)
    env["ATFGRAPH_SWEEP_SECONDS"] = "0.05"
    env["PYTHONPATH"] = os.pathsep.join([str(HERE), str(REPO)])
    return env


class ServerProcess:
    """``python -m atfgraph.server`` on a fixed port and database, restartable. The database is
    a SQLite file in ``home`` or, on the PostgreSQL backend, a new PostgreSQL database."""

    def __init__(self, home: Path, db: str | None = None, args: tuple[str, ...] = ()) -> None:
        self.home = home
        #: more command-line options of the server (logging, metrics)
        self.args = args
        self.db_path = home / "graph.db"
        self._own_db = db is None and ON_POSTGRES
        #: what ``--db`` is given: the SQLite file, or the PostgreSQL URL
        self.db = db or (create_pg_database() if ON_POSTGRES else str(self.db_path))
        self.on_postgres = self.db.startswith("postgresql://")
        #: the same database as pyworkflow's ``configure(storage=...)`` takes it
        self.storage_url = self.db if self.on_postgres else f"sqlite:///{self.db}"
        self.port = free_port()
        self.url = f"http://127.0.0.1:{self.port}"
        self.env = base_env(self.url, home)
        self.proc: subprocess.Popen[bytes] | None = None
        self.log = home / "server.log"

    def start(self) -> None:
        with open(self.log, "ab") as log:
            self.proc = subprocess.Popen(
                [
                    sys.executable,
                    "-m",
                    "atfgraph.server",
                    "--port",
                    str(self.port),
                    "--db",
                    self.db,
                    *self.args,
                ],
                cwd=REPO,
                env=self.env,
                stdout=log,
                stderr=subprocess.STDOUT,
            )
        try:
            wait_until(
                lambda: _ready(self.url), 45, f"server on {self.url} never became ready; see {self.log}"
            )
        except BaseException:
            self.close()  # a fixture whose set-up failed gets no teardown: leave no orphan behind
            raise

    def kill(self) -> None:
        """SIGKILL: no shutdown code runs."""
        if self.proc is not None and self.proc.poll() is None:
            self.proc.send_signal(signal.SIGKILL)
            self.proc.wait(10)

    def close(self) -> None:
        """Kill the server and drop the PostgreSQL database it was given (teardown)."""
        self.kill()
        if self._own_db:
            drop_pg_database(self.db)

    def stop(self) -> None:
        if self.proc is not None and self.proc.poll() is None:
            self.proc.terminate()
            try:
                self.proc.wait(10)
            except subprocess.TimeoutExpired:
                self.kill()

    def log_tail(self, lines: int = 40) -> str:
        """The last ``lines`` of the server's output (for a failure's message)."""
        text = self.log.read_text(errors="replace") if self.log.exists() else ""
        return "\n".join(text.splitlines()[-lines:])

    def token(self, kind: str = "owner") -> str:
        """A credential the server wrote to its data directory on first start."""
        token: str = json.loads((self.home / "credentials.json").read_text())[kind]
        return token

    def headers(self, kind: str = "owner") -> dict[str, str]:
        return {"Authorization": f"Bearer {self.token(kind)}"}

    def get(self, path: str, **params: Any) -> Any:
        response = httpx.get(self.url + "/api/v2" + path, params=params, headers=self.headers(), timeout=10)
        response.raise_for_status()
        return response.json()

    def workers(self, node_id: str | None = None) -> list[dict[str, Any]]:
        items: list[dict[str, Any]] = self.get("/workers")["items"]
        return [w for w in items if node_id is None or w["node_id"] == node_id]

    def worker_ids(self) -> set[str]:
        """The ids of the workers listed now. A new worker is one whose id was not listed
        before: counting them is not enough, as a worker that went silent leaves the list
        meanwhile (seen in the full crash campaign: the count stayed the same for 90 s)."""
        return {w["id"] for w in self.workers()}

    def wait_for_new_worker(self, before: set[str], seconds: float, message: str) -> None:
        wait_until(lambda: bool(self.worker_ids() - before), seconds, message)


def database_dump(server: ServerProcess) -> str:
    """Every row of every table of the server's database, as text (SQLite: ``iterdump``)."""
    if not server.on_postgres:
        import sqlite3

        conn = sqlite3.connect(server.db_path)
        try:
            return "\n".join(conn.iterdump())
        finally:
            conn.close()
    import psycopg

    lines: list[str] = []
    with psycopg.connect(server.db, autocommit=True) as pg:
        tables = pg.execute(
            "SELECT table_name FROM information_schema.tables WHERE table_schema = 'public' ORDER BY 1"
        ).fetchall()
        for (table,) in tables:
            lines.append(f"-- {table}")
            lines += [row[0] for row in pg.execute(f'SELECT t::text FROM "{table}" t').fetchall()]
    return "\n".join(lines)


class WorkerProcess:
    """``python -m atfgraph.worker --module ...`` against a server."""

    def __init__(
        self, server: ServerProcess, module: str, *args: str, env: dict[str, str] | None = None
    ) -> None:
        self.server = server
        self.module = module
        self.args = args
        self.env = {**server.env, **(env or {})}
        self.proc: subprocess.Popen[bytes] | None = None
        self.log = server.home / f"worker-{time.monotonic_ns()}.log"

    def start(self, wait_registered: bool = True) -> WorkerProcess:
        before = self.server.worker_ids() if wait_registered else set()
        with open(self.log, "ab") as log:
            self.proc = subprocess.Popen(
                [sys.executable, "-m", "atfgraph.worker", "--module", self.module, *self.args],
                cwd=REPO,
                env=self.env,
                stdout=log,
                stderr=subprocess.STDOUT,
            )
        if wait_registered:
            self.server.wait_for_new_worker(before, 20, f"worker never registered; see {self.log}")
        return self

    def kill(self) -> None:
        if self.proc is not None and self.proc.poll() is None:
            self.proc.send_signal(signal.SIGKILL)
            self.proc.wait(10)

    def terminate(self, timeout: float = 20) -> int:
        assert self.proc is not None
        self.proc.terminate()
        return self.proc.wait(timeout)

    def output(self) -> str:
        return self.log.read_text(errors="replace")


def _ready(url: str) -> bool:
    try:
        return httpx.get(url + "/readyz", timeout=1).status_code == 200
    except httpx.HTTPError:
        return False


def wait_until(predicate: Any, seconds: float, message: str | Callable[[], str]) -> None:
    """Poll ``predicate`` until it holds, else fail with ``message`` (a callable is asked only
    then: what the state was when the wait gave up, a server's log)."""
    deadline = time.monotonic() + seconds
    while time.monotonic() < deadline:
        if predicate():
            return
        time.sleep(0.05)
    raise AssertionError(message if isinstance(message, str) else message())
