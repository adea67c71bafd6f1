"""pyworkflow's SQLite migrations.

* A database built by applying every migration has exactly the schema committed in
  ``sqlite_schema.sql`` (next to this file). A change to the migrations must come with a new
  snapshot; regenerate it with ``.venv/bin/python tests/migration/test_sqlite_migrations.py``
  and review the diff.
* Applying the migrations one release at a time gives the same schema as applying them at once.
* Re-opening a migrated file applies nothing.
* Several processes opening one new file at the same moment all succeed, and the version table
  records each migration once.
"""

from __future__ import annotations

import os
import sqlite3
import subprocess
import sys
import time
from pathlib import Path

import pytest

from pyworkflow import ConfigurationError
from pyworkflow.store import SQLiteStore, apply_migrations, pyworkflow_migrations

SNAPSHOT = Path(__file__).with_name("sqlite_schema.sql")


def dump_schema(path: Path | str) -> str:
    """Every table, index, view and trigger in the file, as SQLite stores their definitions."""
    conn = sqlite3.connect(path)
    try:
        rows = conn.execute(
            "SELECT type, name, sql FROM sqlite_master WHERE sql IS NOT NULL ORDER BY type DESC, name"
        ).fetchall()
    finally:
        conn.close()
    return "".join(f"-- {kind} {name}\n{sql.strip()};\n\n" for kind, name, sql in rows)


def migrated_file(path: Path) -> Path:
    """A new file with every migration applied the way the store applies them on open."""
    SQLiteStore(str(path)).close()
    return path


def versions(path: Path) -> list[tuple[str, int, str, float]]:
    conn = sqlite3.connect(path)
    try:
        return conn.execute(
            "SELECT component, version, name, applied_at FROM schema_migrations ORDER BY component, version"
        ).fetchall()
    finally:
        conn.close()


def test_migrations_are_numbered_and_present() -> None:
    migrations = pyworkflow_migrations("sqlite")
    assert migrations, "no migrations found in pyworkflow.store.migrations/sqlite"
    assert [m.version for m in migrations] == list(range(1, len(migrations) + 1))
    assert {m.component for m in migrations} == {"pyworkflow"}


def test_migrated_database_matches_the_committed_schema(tmp_path: Path) -> None:
    actual = dump_schema(migrated_file(tmp_path / "new.db"))
    assert SNAPSHOT.exists(), f"{SNAPSHOT} is missing; generate it: python {Path(__file__).as_posix()}"
    expected = SNAPSHOT.read_text(encoding="utf-8")
    assert actual == expected, (
        "the migrations no longer produce tests/migration/sqlite_schema.sql; if the change is "
        f"intended, regenerate the snapshot (python {Path(__file__).as_posix()}) and review the diff"
    )


def test_schema_holds_the_tables_the_store_needs(tmp_path: Path) -> None:
    schema = dump_schema(migrated_file(tmp_path / "new.db"))
    for table in (
        "runs",
        "events",
        "steps",
        "waits",
        "wait_tokens",
        "checkpoints",
        "queue",
        "schema_migrations",
    ):
        assert f"-- table {table}\n" in schema, table


def test_upgrading_one_migration_at_a_time_equals_applying_all(tmp_path: Path) -> None:
    migrations = pyworkflow_migrations("sqlite")
    stepwise = tmp_path / "stepwise.db"
    for n in range(1, len(migrations) + 1):  # one process per released version
        conn = sqlite3.connect(stepwise, isolation_level=None)
        try:
            applied = apply_migrations(conn, migrations[:n])
        finally:
            conn.close()
        assert [m.version for m in applied] == [n]
    assert dump_schema(stepwise) == dump_schema(migrated_file(tmp_path / "all.db"))


def test_reopening_applies_nothing(tmp_path: Path) -> None:
    path = migrated_file(tmp_path / "twice.db")
    before_versions, before_schema = versions(path), dump_schema(path)
    assert [(c, v) for c, v, _, _ in before_versions] == [
        ("pyworkflow", m.version) for m in pyworkflow_migrations("sqlite")
    ]

    conn = sqlite3.connect(path, isolation_level=None)
    try:
        assert apply_migrations(conn, pyworkflow_migrations("sqlite")) == []
    finally:
        conn.close()
    SQLiteStore(str(path)).close()  # and through the store's own open

    assert versions(path) == before_versions  # same rows, same applied_at
    assert dump_schema(path) == before_schema
    conn = sqlite3.connect(path)
    try:
        assert conn.execute("PRAGMA integrity_check").fetchall() == [("ok",)]
    finally:
        conn.close()


def test_a_database_upgraded_by_a_newer_version_is_refused_and_left_alone(tmp_path: Path) -> None:
    """Code that meets a migration it does not ship (a newer version upgraded the file) refuses
    to open it, saying why, instead of misreading or half-undoing what the newer version wrote;
    another component's track (the graph server's, here unknown to pyworkflow) is not its concern."""
    path = migrated_file(tmp_path / "newer.db")
    newest = pyworkflow_migrations("sqlite")[-1].version
    conn = sqlite3.connect(path, isolation_level=None)
    try:
        conn.execute(
            "INSERT INTO schema_migrations VALUES ('pyworkflow', ?, 'from_the_future', 0)", (newest + 1,)
        )
        conn.execute("INSERT INTO schema_migrations VALUES ('someone_else', 99, 'theirs', 0)")
    finally:
        conn.close()
    before_versions, before_schema = versions(path), dump_schema(path)
    with pytest.raises(ConfigurationError) as refused:
        SQLiteStore(str(path))
    assert str(refused.value) == (
        f"the database was upgraded by a newer version of this software (pyworkflow schema "
        f"{newest + 1}; this version knows up to {newest}): run the newer version, or open a backup "
        "made before the upgrade"
    )
    assert versions(path) == before_versions and dump_schema(path) == before_schema


def test_a_failing_migration_leaves_nothing_behind(tmp_path: Path) -> None:
    """All pending migrations apply in one transaction: a broken one rolls every one back."""
    from pyworkflow.store import Migration

    broken = [
        *pyworkflow_migrations("sqlite"),
        Migration("pyworkflow", 99, "broken", "CREATE TABLE runs (x);"),
    ]
    path = tmp_path / "broken.db"
    conn = sqlite3.connect(path, isolation_level=None)
    try:
        with pytest.raises(sqlite3.OperationalError, match="already exists"):
            apply_migrations(conn, broken)
        assert conn.execute("SELECT name FROM sqlite_master").fetchall() == []
    finally:
        conn.close()


OPENER = """
import sys, time
from pathlib import Path

from pyworkflow.store import SQLiteStore

db, go = sys.argv[1], Path(sys.argv[2])
while not go.exists():
    time.sleep(0.001)
store = SQLiteStore(db)
store.db.reader().execute("SELECT COUNT(*) FROM runs").fetchone()
store.close()
print("opened")
"""


@pytest.mark.parametrize("processes", [2, 6])
def test_processes_opening_a_new_file_at_once_all_succeed(tmp_path: Path, processes: int) -> None:
    for attempt in range(3):  # several rounds: a race that loses only sometimes must show
        db, go = tmp_path / f"race{attempt}.db", tmp_path / f"go{attempt}"
        procs = [
            subprocess.Popen(
                [sys.executable, "-c", OPENER, str(db), str(go)],
                stdout=subprocess.PIPE,
                stderr=subprocess.PIPE,
                text=True,
                env={**os.environ, "PYTHONWARNINGS": "error"},
            )
            for _ in range(processes)
        ]
        time.sleep(0.4)  # let every interpreter start and spin on the go file
        go.touch()
        outcomes = [(p.wait(timeout=60), *p.communicate()) for p in procs]
        for rc, out, err in outcomes:
            assert (rc, out.strip()) == (0, "opened"), err[-3000:]
        rows = versions(db)
        assert [(c, v) for c, v, _, _ in rows] == [
            ("pyworkflow", m.version) for m in pyworkflow_migrations("sqlite")
        ]
        assert dump_schema(db) == SNAPSHOT.read_text(encoding="utf-8")


if __name__ == "__main__":
    import tempfile

    with tempfile.TemporaryDirectory() as scratch:
        SNAPSHOT.write_text(dump_schema(migrated_file(Path(scratch) / "snapshot.db")), encoding="utf-8")
    print(f"wrote {SNAPSHOT}")
