"""``atfg db backup`` (SQLite's online backup API) against a real server under write load: the
copy opens, passes ``PRAGMA integrity_check`` and ``foreign_key_check``, holds exactly the
submissions acknowledged before some instant (each one whole: its run, queue row and audit
entry), and a server started on it in place of the original (the documented restore) serves
that data and takes new writes. PostgreSQL is refused with the pg_dump advice, and the
documented pg_dump / pg_restore round trip is run too (bad input: tests/unit/atfgraph/test_backup.py)."""

from __future__ import annotations

import json
import shutil
import sqlite3
import subprocess
import sys
import threading
from pathlib import Path
from typing import Any

import httpx
import pytest
from atfg_harness import ServerProcess, create_pg_database, drop_pg_database

ATFG = str(Path(sys.executable).parent / "atfg")


def atfg(*args: str, cwd: Path) -> subprocess.CompletedProcess[str]:
    return subprocess.run([ATFG, *args], cwd=cwd, capture_output=True, text=True, timeout=120)


class Submitter(threading.Thread):
    """Submits traversers one after another until stopped; ``ids`` in acknowledgement order."""

    def __init__(self, server: ServerProcess) -> None:
        super().__init__(daemon=True)
        self.server = server
        self.ids: list[str] = []
        self.stop = threading.Event()
        self.failure: BaseException | None = None

    def run(self) -> None:
        try:
            with httpx.Client(base_url=self.server.url, headers=self.server.headers(), timeout=30) as http:
                while not self.stop.is_set():
                    r = http.post(
                        "/api/v2/traversers", json={"target": "nobody.skill", "input": {"n": len(self.ids)}}
                    )
                    assert r.status_code == 201, r.text
                    self.ids.append(r.json()["id"])
        except BaseException as exc:  # reported by the test
            self.failure = exc


def copied_runs(path: Path) -> list[str]:
    conn = sqlite3.connect(path)
    try:
        assert [r[0] for r in conn.execute("PRAGMA integrity_check")] == ["ok"]
        assert conn.execute("PRAGMA foreign_key_check").fetchall() == []
        runs = [r[0] for r in conn.execute("SELECT id FROM runs WHERE node_id IS NOT NULL")]
        queued = {r[0] for r in conn.execute("SELECT run_id FROM queue")}
        audited = {
            r[0] for r in conn.execute("SELECT target FROM atfg_audit WHERE action = 'traverser.submit'")
        }
        # Each submission is one transaction: in the copy whole, or not at all.
        assert set(runs) == queued == audited, (len(runs), len(queued), len(audited))
        return runs
    finally:
        conn.close()


def test_a_backup_taken_under_write_load_is_consistent_and_a_server_serves_it(tmp_path: Path) -> None:
    server = ServerProcess(tmp_path, db=str(tmp_path / "graph.db"))  # SQLite on either backend
    server.start()
    try:
        restored_serves_the_copy(server, tmp_path)
    finally:
        server.close()


def restored_serves_the_copy(server: ServerProcess, tmp_path: Path) -> None:
    load = Submitter(server)
    try:
        load.start()
        while len(load.ids) < 50 and load.is_alive():
            load.stop.wait(0.01)
        before = len(load.ids)
        (tmp_path / "backups").mkdir()
        done = atfg(
            "db", "backup", str(tmp_path / "backups"), "--db", str(server.db_path), "-o", "json", cwd=tmp_path
        )
        assert done.returncode == 0, done.stderr
        record: dict[str, Any] = json.loads(done.stdout)
        during = len(load.ids)
        while len(load.ids) < during + 20 and load.is_alive():  # the server kept writing
            load.stop.wait(0.01)
    finally:
        load.stop.set()
        load.join(30)
    assert load.failure is None, load.failure
    backup = Path(record["backup"])
    assert record["integrity"] == "ok" and backup.parent == tmp_path / "backups"
    assert sorted(p.name for p in backup.parent.iterdir()) == [backup.name]  # no -wal, no partial
    runs = copied_runs(backup)
    # The copy is the database at one instant: exactly the first K acknowledged submissions.
    assert before <= len(runs) <= during + 1 < len(load.ids), (before, len(runs), during, len(load.ids))
    assert set(runs) == set(load.ids[: len(runs)])
    # Restore: stop the server, put the copy in place of the file (and drop its WAL), start it.
    server.kill()
    for suffix in ("-wal", "-shm"):
        Path(f"{server.db_path}{suffix}").unlink(missing_ok=True)
    shutil.copyfile(backup, server.db_path)
    server.start()
    try:
        last, lost = runs[-1], load.ids[len(runs)]
        assert server.get(f"/traversers/{last}")["id"] == last
        r = httpx.get(f"{server.url}/api/v2/traversers/{lost}", headers=server.headers(), timeout=10)
        assert r.status_code == 404  # written after the backup
        r = httpx.post(
            f"{server.url}/api/v2/traversers", json={"target": "nobody.skill"}, headers=server.headers()
        )
        assert r.status_code == 201, r.text
    finally:
        server.close()


def test_postgresql_backup_and_restore_with_pg_dump_and_pg_restore(tmp_path: Path) -> None:
    """The commands docs/operations.md gives for PostgreSQL, on a real server's database."""
    for tool in ("pg_dump", "pg_restore"):
        if shutil.which(tool) is None:
            pytest.fail(f"{tool} is missing (apt-get install postgresql-client)", pytrace=False)
    original, restored = create_pg_database(), create_pg_database()
    server = ServerProcess(tmp_path / "a", db=original)
    (tmp_path / "a").mkdir()
    server.start()
    try:
        with httpx.Client(base_url=server.url, headers=server.headers(), timeout=30) as http:
            ids = [
                http.post("/api/v2/traversers", json={"target": "nobody.skill"}).json()["id"]
                for _ in range(5)
            ]
        dump = tmp_path / "atfgraph.dump"
        subprocess.run(["pg_dump", "--format=custom", f"--file={dump}", original], check=True, timeout=120)
        subprocess.run(
            ["pg_restore", "--no-owner", f"--dbname={restored}", str(dump)], check=True, timeout=120
        )
        server.kill()
        (tmp_path / "b").mkdir()
        again = ServerProcess(tmp_path / "b", db=restored)
        again.start()
        try:
            headers = server.headers()  # the tokens are in the database: the old owner token works
            for ident in ids:
                r = httpx.get(f"{again.url}/api/v2/traversers/{ident}", headers=headers, timeout=10)
                assert r.status_code == 200 and r.json()["id"] == ident, r.text
            r = httpx.post(f"{again.url}/api/v2/traversers", json={"target": "nobody.skill"}, headers=headers)
            assert r.status_code == 201, r.text
        finally:
            again.kill()
    finally:
        server.kill()
        drop_pg_database(original)
        drop_pg_database(restored)
