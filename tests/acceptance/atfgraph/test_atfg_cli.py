"""The command line: `atfg server start` / `python -m atfgraph.server`, `atfg ps`, `atfg db migrate`, and
`atfg runs watch` riding out a server restart (each test with its own server)."""

from __future__ import annotations

import json
import select
import sqlite3
import subprocess
import sys
import time
from collections.abc import Callable
from pathlib import Path
from typing import IO

import httpx
import pytest
from atfg_harness import (
    REPO,
    ServerProcess,
    WorkerProcess,
    base_env,
    create_pg_database,
    drop_pg_database,
    free_port,
    wait_until,
)
from atfg_waits import reach

from atfgraph import Client
from atfgraph.cli._db import server_migrations


def first_line(stream: IO[str], seconds: float = 30) -> str:
    """The next line a subprocess writes, failing (not hanging) when none comes in time."""
    ready, _, _ = select.select([stream], [], [], seconds)
    assert ready, f"no output within {seconds}s"
    return stream.readline()


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


@pytest.mark.parametrize(
    "db",
    ["postgresql://postgres:secret@127.0.0.1:1/nowhere", "{tmp}", "/proc/atfg/graph.db"],
    ids=["unreachable-postgres", "a-directory", "an-uncreatable-path"],
)
def test_server_start_with_a_database_it_cannot_open_is_one_line_and_status_2(
    tmp_path: Path, db: str
) -> None:
    argv = [str(Path(sys.executable).parent / "atfg"), "server", "start", "--port", str(free_port())]
    env = base_env("http://127.0.0.1:1", tmp_path)
    argv += ["--db", db.format(tmp=tmp_path)]
    done = subprocess.run(argv, cwd=REPO, env=env, capture_output=True, text=True, timeout=60)
    assert done.returncode == 2, done.stderr
    assert "Traceback" not in done.stderr and "secret" not in done.stderr
    last = done.stderr.strip().splitlines()[-1]
    assert last.startswith("atfgraph: cannot open the database "), done.stderr


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


async def test_atfg_ps_lists_running_and_waiting_traversers(
    server: ServerProcess, spawn_worker: Callable[..., WorkerProcess], client: Client
) -> None:
    spawn_worker()
    handle = await client.submit("tester.pausing", {"key": "ps"})
    info = await reach(client, handle.id, "waiting")
    busy = await client.submit("tester.sleeper", {"seconds": 30})
    await reach(client, busy.id, "running")
    atfg = str(Path(sys.executable).parent / "atfg")
    table = subprocess.run([atfg, "ps"], env=server.env, capture_output=True, text=True, timeout=30)
    assert table.returncode == 0, table.stderr
    [row] = [line for line in table.stdout.splitlines() if line.startswith(handle.id)]
    assert row.split()[:6] == [handle.id, "tester.pausing", "waiting", "1/3", str(info.waiting_on), "ps"]
    [row] = [line for line in table.stdout.splitlines() if line.startswith(busy.id)]
    assert row.split()[:4] == [busy.id, "tester.sleeper", "running", "1/3"]
    lines = subprocess.run(
        [atfg, "ps", "-o", "jsonl", "--server", server.url],
        env=server.env,
        capture_output=True,
        text=True,
        timeout=30,
    ).stdout.splitlines()
    assert sorted(json.loads(line)["id"] for line in lines) == sorted([handle.id, busy.id])
    waiting = subprocess.run(
        [atfg, "ps", "--status", "waiting", "-o", "json"], env=server.env, capture_output=True, text=True
    )
    [item] = json.loads(waiting.stdout)
    assert (item["id"], item["waiting_on"], item["operation_key"]) == (handle.id, info.waiting_on, "ps")
    done = subprocess.run(
        [atfg, "ps", "--status", "succeeded", "-o", "json"], env=server.env, capture_output=True, text=True
    )
    assert json.loads(done.stdout) == []
    await client.cancel(busy.id)


def _schema_versions(db: Path | str) -> set[tuple[str, int]]:
    """The (component, version) pairs recorded in a SQLite file or a PostgreSQL database."""
    if str(db).startswith("postgresql://"):
        import psycopg

        with psycopg.connect(str(db), autocommit=True) as pg:
            if pg.execute("SELECT to_regclass('schema_migrations')").fetchone() == (None,):
                return set()
            return {(c, v) for c, v in pg.execute("SELECT component, version FROM schema_migrations")}
    conn = sqlite3.connect(db)
    try:
        return {(c, v) for c, v in conn.execute("SELECT component, version FROM schema_migrations")}
    finally:
        conn.close()


def test_a_database_upgraded_by_a_newer_version_is_refused_by_the_server_and_the_cli(
    server: ServerProcess, tmp_path: Path
) -> None:
    """A server (or ``atfg db migrate``) of an older version than the one that last migrated the
    database refuses it in one line and changes nothing, instead of serving a schema it does not
    know."""
    newest = server_migrations("postgres" if server.on_postgres else "sqlite")
    future = max(m.version for m in newest if m.component == "atfgraph") + 1
    server.kill()
    insert = "INSERT INTO schema_migrations VALUES ('atfgraph', {}, 'from_the_future', 0)"
    if server.on_postgres:
        import psycopg

        with psycopg.connect(server.db, autocommit=True) as pg:
            pg.execute(insert.format("%s"), (future,))
    else:
        conn = sqlite3.connect(server.db)
        try:
            conn.execute(insert.format("?"), (future,))
            conn.commit()
        finally:
            conn.close()
    before = _schema_versions(server.db)
    why = f"(atfgraph schema {future}; this version knows up to {future - 1})"
    started = subprocess.run(
        [sys.executable, "-m", "atfgraph.server", "--port", str(server.port), "--db", server.db],
        env=server.env, capture_output=True, text=True, timeout=60,
    )  # fmt: skip
    assert started.returncode == 2, started.stderr
    _banner, line = started.stderr.strip().splitlines()  # where it was to serve, then why it cannot
    assert line.startswith("atfgraph: cannot open the database") and why in line, line
    atfg = str(Path(sys.executable).parent / "atfg")
    for extra in ((), ("--sql",)):
        migrated = subprocess.run(
            [atfg, "db", "migrate", "--db", server.db, *extra],
            env=server.env, capture_output=True, text=True, timeout=60,
        )  # fmt: skip
        assert (migrated.returncode, migrated.stdout) == (1, ""), migrated.stderr
        (line,) = migrated.stderr.strip().splitlines()
        assert why in line and "run the newer version" in line, line
    assert _schema_versions(server.db) == before


def test_db_migrate(server: ServerProcess, tmp_path: Path) -> None:
    """``atfg db migrate`` builds what the server builds (in a database of the server's kind);
    ``--sql`` shows it and touches nothing."""
    atfg = str(Path(sys.executable).parent / "atfg")
    db: Path | str = create_pg_database() if server.on_postgres else tmp_path / "fresh" / "graph.db"
    try:
        _check_db_migrate(server, tmp_path, atfg, db)
    finally:
        if server.on_postgres:
            drop_pg_database(str(db))


def _check_db_migrate(server: ServerProcess, tmp_path: Path, atfg: str, db: Path | str) -> None:

    def run(*args: str) -> subprocess.CompletedProcess[str]:
        return subprocess.run(
            [atfg, "db", "migrate", *args], env=server.env, capture_output=True, text=True, timeout=60
        )

    preview = run("--db", str(db), "--sql")
    assert preview.returncode == 0, preview.stderr
    assert (
        "CREATE TABLE" in preview.stdout
        and "atfg_traversers" in preview.stdout
        and "atfg_tokens" in preview.stdout
    )
    assert "-- atfgraph 0001_initial" in preview.stdout
    if isinstance(db, Path):
        assert not db.exists()
    else:
        assert _schema_versions(db) == set()

    applied = run("--db", str(db), "-o", "json")
    assert applied.returncode == 0, applied.stderr
    done = {(m["component"], m["version"]) for m in json.loads(applied.stdout)}
    # The same version tracks as a server's own database, so a server on this file applies nothing.
    assert done == _schema_versions(server.db) == _schema_versions(db)
    assert f"{db}: applied {len(done)} migration(s)" in applied.stderr

    again = run("--db", str(db), "-o", "json")
    assert (again.returncode, json.loads(again.stdout)) == (0, [])
    assert "up to date" in again.stderr
    nothing = run("--db", str(db), "--sql")
    assert (nothing.returncode, nothing.stdout) == (0, "")
    # The default database is the server's: $ATFGRAPH_DB, else $ATFGRAPH_HOME/atfgraph.db.
    home = tmp_path / "home"
    default = subprocess.run(
        [atfg, "db", "migrate"],
        env={**server.env, "ATFGRAPH_HOME": str(home)},
        capture_output=True,
        text=True,
    )
    assert default.returncode == 0, default.stderr
    # (always a SQLite file: the PostgreSQL tracks may hold more versions than SQLite's)
    sqlite_tracks = {(m.component, m.version) for m in server_migrations("sqlite")}
    assert _schema_versions(home / "atfgraph.db") == (sqlite_tracks if server.on_postgres else done)
    broken = run("--db", str(tmp_path))  # a directory
    assert broken.returncode == 2 and len(broken.stderr.splitlines()) == 1, broken.stderr
    # A PostgreSQL server that is not there (nothing listens on port 1): one line, nothing else.
    unreachable = run("--db", "postgresql://postgres:secret@127.0.0.1:1/nowhere")
    assert unreachable.returncode == 2 and len(unreachable.stderr.splitlines()) == 1, unreachable.stderr
    assert "cannot migrate postgresql://postgres:***@127.0.0.1:1/nowhere" in unreachable.stderr
    assert "secret" not in unreachable.stderr


async def test_watch_rides_out_a_server_restart(
    server: ServerProcess, spawn_worker: Callable[..., WorkerProcess], client: Client
) -> None:
    spawn_worker()
    handle = await client.submit("tester.pausing", {"key": "restart"})
    info = await reach(client, handle.id, "waiting")
    atfg = str(Path(sys.executable).parent / "atfg")
    watch = subprocess.Popen(
        [atfg, "runs", "watch", handle.id, "-o", "json"],
        env=server.env,
        stdout=subprocess.PIPE,
        stderr=subprocess.PIPE,
        text=True,
    )
    try:
        assert watch.stderr is not None
        assert first_line(watch.stderr).split()[2] == "waiting"  # the watcher is following
        server.kill()
        time.sleep(0.5)
        server.start()  # same port and database
        spawn_worker()
        await client.decide_approval(str(info.waiting_on), "approved")
        out, err = watch.communicate(timeout=45)
    finally:
        watch.kill()
    assert watch.returncode == 0, err
    assert json.loads(out)["status"] == "succeeded"
    assert f"cannot reach the atfgraph server at {server.url}" in err and "retrying" in err
    assert err.splitlines()[-1].split()[2] == "succeeded"
