"""Numbered SQL migrations, one folder per dialect, applied in order and recorded in
``schema_migrations`` (one version track per component, so pyworkflow and atfgraph share the
runner and the database but number their own files).

File names are ``NNNN_description.sql``; a migration is never edited once released.
"""

from __future__ import annotations

import re
import sqlite3
import time
from collections.abc import Sequence
from dataclasses import dataclass
from importlib import resources

_NAME = re.compile(r"^(\d{4})_([a-z0-9_]+)\.sql$")


@dataclass(frozen=True, slots=True)
class Migration:
    component: str
    version: int
    name: str
    sql: str


def load_migrations(package: str, dialect: str, component: str) -> list[Migration]:
    """The migrations shipped in ``package``/``dialect``/, sorted by version."""
    folder = resources.files(package).joinpath(dialect)
    found: list[Migration] = []
    for entry in folder.iterdir():
        match = _NAME.match(entry.name)
        if match is None:
            continue
        found.append(Migration(component, int(match.group(1)), match.group(2), entry.read_text("utf-8")))
    found.sort(key=lambda m: m.version)
    versions = [m.version for m in found]
    if versions != list(range(1, len(found) + 1)):
        raise RuntimeError(
            f"{package}/{dialect}: migrations must be numbered 1..N without gaps, got {versions}"
        )
    return found


def split_statements(sql: str) -> list[str]:
    """Split a script into complete statements (SQLite's own notion of completeness)."""
    statements: list[str] = []
    current: list[str] = []
    for line in sql.splitlines(keepends=True):
        current.append(line)
        text = "".join(current)
        if sqlite3.complete_statement(text):
            if text.strip():
                statements.append(text.strip())
            current = []
    rest = "".join(current).strip()
    if rest and not all(part.strip().startswith("--") for part in rest.splitlines() if part.strip()):
        raise ValueError(f"incomplete SQL statement at end of migration: {rest[:80]!r}")
    return statements


_VERSION_TABLE = """
CREATE TABLE IF NOT EXISTS schema_migrations (
    component  TEXT    NOT NULL,
    version    INTEGER NOT NULL,
    name       TEXT    NOT NULL,
    applied_at REAL    NOT NULL,
    PRIMARY KEY (component, version)
)
"""


def apply_migrations(
    conn: sqlite3.Connection, migrations: Sequence[Migration]
) -> list[Migration]:
    """Apply the migrations not yet recorded, all in one IMMEDIATE transaction, so that two
    processes opening a new file at once serialize and the second finds nothing to do."""
    if not migrations:
        return []
    conn.execute("BEGIN IMMEDIATE")
    try:
        conn.execute(_VERSION_TABLE)
        applied = {
            (row[0], row[1]) for row in conn.execute("SELECT component, version FROM schema_migrations")
        }
        done: list[Migration] = []
        for migration in migrations:
            if (migration.component, migration.version) in applied:
                continue
            for statement in split_statements(migration.sql):
                conn.execute(statement)
            conn.execute(
                "INSERT INTO schema_migrations (component, version, name, applied_at) VALUES (?, ?, ?, ?)",
                (migration.component, migration.version, migration.name, time.time()),
            )
            done.append(migration)
        conn.execute("COMMIT")
        return done
    except BaseException:
        conn.execute("ROLLBACK")
        raise
