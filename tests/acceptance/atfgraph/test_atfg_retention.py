"""Retention on a real database (a SQLite file, or PostgreSQL with PYWORKFLOW_TEST_STORE=postgresql):
``atfg db purge`` over 10,000 finished runs of both faces, its dry run, the audit trail's own
cut-off, bad arguments that change nothing, and the server's purger deleting a real traverser
once it is older than the configured retention.

An oracle after each purge: every row of every purged run is gone from every table (the
engine's and atfgraph's rows about its waits), every run that was not due (recent, or not
finished) keeps all of its rows."""

from __future__ import annotations

import re
import subprocess
import sys
import time
from collections.abc import Iterator
from pathlib import Path

import httpx
import pytest
from atfg_harness import ServerProcess, WorkerProcess, wait_until
from atfg_retention import Db, rows_of, seed_audit, seed_runs

ATFG = str(Path(sys.executable).parent / "atfg")
DAY = 86400.0


def atfg(server: ServerProcess, *args: str) -> subprocess.CompletedProcess[str]:
    return subprocess.run(
        [ATFG, *args], env=server.env, cwd=server.home, capture_output=True, text=True, timeout=300
    )


@pytest.fixture
def database(tmp_path: Path) -> Iterator[ServerProcess]:
    """A migrated database with no server running on it (``atfg db migrate``)."""
    proc = ServerProcess(tmp_path)
    done = atfg(proc, "db", "migrate", "--db", proc.db)
    assert done.returncode == 0, done.stderr
    yield proc
    proc.close()


def _table(out: str) -> dict[str, int]:
    rows = [line.split() for line in out.splitlines()[2:] if line.strip()]
    return {name: int(n) for name, n in rows}


def test_purge_of_10000_runs_counts_and_deletes_everything_of_theirs(database: ServerProcess) -> None:
    db = Db(database.db)
    old = time.time() - 40 * DAY
    try:
        seed_runs(db, "wf", 5000, finished_at=old)
        seed_runs(db, "tr", 5000, finished_at=old, kind="approval")
        seed_runs(db, "recent", 50, finished_at=time.time() - DAY)
        seed_runs(db, "open", 50, finished_at=None)
        seed_audit(db, 2000, old)
        seed_audit(db, 10, time.time())
        kept_before = {p: rows_of(db, p) for p in ("recent", "open")}
        assert kept_before["recent"]["runs"] == kept_before["open"]["runs"] == 50
        assert kept_before["recent"]["events"] == 100 and kept_before["open"]["wait_tokens"] == 50
    finally:
        db.close()

    dry = atfg(database, "db", "purge", "--db", database.db, "--older-than", "30d",
               "--audit-older-than", "30d", "--dry-run")  # fmt: skip
    assert dry.returncode == 0, dry.stderr
    assert "dry run, nothing deleted; 10000 run(s) would be purged" in dry.stderr
    expected = {
        "runs": 10000, "events": 20000, "steps": 10000, "waits": 10000, "wait_tokens": 10000,
        "checkpoints": 10000, "queue": 0, "atfg_wait_links": 5000, "atfg_deliveries": 5000,
        "atfg_assignments": 5000, "atfg_wait_events": 10000, "atfg_audit": 2000,
    }  # fmt: skip
    assert _table(dry.stdout) == expected
    db = Db(database.db)
    try:
        assert db.scalar("SELECT COUNT(*) FROM runs") == 10100  # the dry run deleted nothing
    finally:
        db.close()

    done = atfg(database, "db", "purge", "--db", database.db, "--older-than", "30d",
                "--audit-older-than", "30d")  # fmt: skip
    assert done.returncode == 0, done.stderr
    assert _table(done.stdout) == expected
    line = re.search(
        r"purged 10000 run\(s\) and 2000 audit entr\(ies\) in (\d+) batch\(es\), ([\d.]+) s", done.stderr
    )
    assert line, done.stderr
    assert int(line.group(1)) >= 10000 // 500 + 2000 // 1000  # bounded transactions, not one
    print(f"\npurge rate ({database.db.split('://')[0]}): {done.stderr.strip()}")

    db = Db(database.db)
    try:
        for prefix in ("wf", "tr"):
            assert set(rows_of(db, prefix).values()) == {0}, prefix
        assert {p: rows_of(db, p) for p in ("recent", "open")} == kept_before
        assert db.scalar("SELECT COUNT(*) FROM atfg_audit") >= 10  # the recent entries (and the purge's own)
        assert db.scalar("SELECT COUNT(*) FROM atfg_audit WHERE at < ?", (time.time() - DAY,)) == 0
    finally:
        db.close()

    again = atfg(database, "db", "purge", "--db", database.db, "--older-than", "30d", "-o", "json")
    assert again.returncode == 0 and '"rows": 10000' not in again.stdout


BAD = [
    (("--older-than", "soon"), "--older-than must be an age"),
    (("--older-than", "0d"), "--older-than must be a positive age"),
    (("--audit-older-than", "-3d"), "--audit-older-than must be an age"),
    (("--older-than", "30d", "--db", "mysql://nowhere"), "--db:"),
    ((), "say what to purge"),
]


def test_bad_purge_arguments_are_one_line_and_change_nothing(database: ServerProcess) -> None:
    db = Db(database.db)
    try:
        seed_runs(db, "old", 10, finished_at=time.time() - 40 * DAY)
    finally:
        db.close()
    for args, message in BAD:
        done = atfg(database, "db", "purge", "--db", database.db, *args)
        assert (done.returncode, done.stdout) == (2, ""), (args, done.returncode, done.stdout, done.stderr)
        assert len(done.stderr.splitlines()) == 1 and message in done.stderr, (args, done.stderr)
    db = Db(database.db)
    try:
        assert rows_of(db, "old")["runs"] == 10
    finally:
        db.close()


def test_purge_of_a_file_that_does_not_exist_creates_nothing(tmp_path: Path) -> None:
    missing = tmp_path / "nothing.db"
    proc = ServerProcess(tmp_path, db=str(missing))
    done = atfg(proc, "db", "purge", "--db", str(missing), "--older-than", "30d")
    assert done.returncode == 2 and "no database file" in done.stderr and not missing.exists()


def test_the_server_purges_finished_runs_older_than_its_retention(tmp_path: Path) -> None:
    server = ServerProcess(tmp_path, args=("--retention", "2s", "--audit-retention", "30d"))
    server.env["ATFGRAPH_PURGE_SECONDS"] = "0.2"
    server.start()
    worker = WorkerProcess(server, "atfg_agents:app").start()
    try:
        headers = server.headers()
        with httpx.Client(base_url=f"{server.url}/api/v2", headers=headers, timeout=30) as http:
            view = http.post("/traversers", json={"target": "tester.lookup", "input": {"ticket": "x"}}).json()
            run_id = view["id"]
            wait_until(
                lambda: http.get(f"/traversers/{run_id}").json().get("status") == "succeeded",
                30,
                "the traverser never succeeded",
            )
            db = Db(server.db)
            try:
                seed_runs(db, "old", 600, finished_at=time.time() - 40 * DAY)  # more than a batch
                seed_runs(db, "open", 5, finished_at=None)
            finally:
                db.close()
            wait_until(lambda: http.get(f"/runs/{run_id}").status_code == 404, 30, "the run was never purged")
            db = Db(server.db)
            try:
                wait_until(lambda: rows_of(db, "old")["runs"] == 0, 30, "the old runs were never purged")
                assert set(rows_of(db, "old").values()) == {0}
                assert rows_of(db, "open")["runs"] == 5
                assert db.scalar("SELECT COUNT(*) FROM steps WHERE run_id = ?", (run_id,)) == 0
                # the trail has its own retention (30 days here): the run's submission is still in it
                assert db.scalar("SELECT COUNT(*) FROM atfg_audit WHERE target = ?", (run_id,)) == 1
            finally:
                db.close()
    finally:
        worker.kill()
        server.close()


def test_a_bad_retention_stops_the_server_from_starting(tmp_path: Path) -> None:
    server = ServerProcess(tmp_path)
    command = [sys.executable, "-m", "atfgraph.server", "--db", server.db, "--port", str(server.port)]
    done = subprocess.run(
        [*command, "--retention", "forever"], env=server.env, capture_output=True, text=True, timeout=60
    )
    assert done.returncode == 2 and "retention must be an age" in done.stderr, done.stderr
    server.close()
