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
from contextlib import AbstractContextManager
from dataclasses import dataclass
from importlib import resources
from typing import Any, Protocol

from .._errors import ConfigurationError

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
#: A migration applied (both dialects).
SQL_RECORD_MIGRATION = (
    "INSERT INTO schema_migrations (component, version, name, applied_at) VALUES (?, ?, ?, ?)"
)


def refuse_newer_schema(applied: set[tuple[Any, Any]], migrations: Sequence[Migration]) -> None:
    """Raise :class:`~pyworkflow.ConfigurationError` when the database records a migration of one
    of these components that this code does not ship: a newer version upgraded it, and this one
    would misread (or undo) what that version writes. Nothing is changed."""
    known: dict[str, int] = {}
    for migration in migrations:
        known[migration.component] = max(known.get(migration.component, 0), migration.version)
    for component, version in sorted(applied, key=lambda cv: (str(cv[0]), int(cv[1]))):
        if component in known and int(version) > known[component]:
            raise ConfigurationError(
                f"the database was upgraded by a newer version of this software ({component} "
                f"schema {int(version)}; this version knows up to {known[component]}): run the "
                "newer version, or open a backup made before the upgrade"
            )


def apply_migrations(conn: sqlite3.Connection, migrations: Sequence[Migration]) -> list[Migration]:
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
        refuse_newer_schema(applied, migrations)
        done: list[Migration] = []
        for migration in migrations:
            if (migration.component, migration.version) in applied:
                continue
            for statement in split_statements(migration.sql):
                conn.execute(statement)
            conn.execute(
                SQL_RECORD_MIGRATION,
                (migration.component, migration.version, migration.name, time.time()),
            )
            done.append(migration)
        conn.execute("COMMIT")
        return done
    except BaseException:
        conn.execute("ROLLBACK")
        raise


# -- PostgreSQL ---------------------------------------------------------------------------------

#: Key of the transaction-scoped advisory lock that serializes migrators of one database.
PG_MIGRATION_LOCK = 0x7079_776F_726B  # "pywork"
SQL_PG_MIGRATION_LOCK = "SELECT pg_advisory_xact_lock(?)"

_PG_VERSION_TABLE = """
CREATE TABLE IF NOT EXISTS schema_migrations (
    component  text             NOT NULL,
    version    integer          NOT NULL,
    name       text             NOT NULL,
    applied_at double precision NOT NULL,
    PRIMARY KEY (component, version)
)
"""


class _PgConnection(Protocol):
    """The part of a synchronous psycopg connection the migrator uses (psycopg stays optional)."""

    def execute(self, query: Any, params: Any = None, /) -> Any: ...
    def transaction(self) -> AbstractContextManager[Any]: ...


def apply_postgres_migrations(conn: _PgConnection, migrations: Sequence[Migration]) -> list[Migration]:
    """Apply the migrations not yet recorded in one transaction that first takes
    ``pg_advisory_xact_lock``: concurrent migrators queue on the lock, and each sees the versions
    the previous one committed (READ COMMITTED reads after the lock), so the schema is built once."""
    if not migrations:
        return []
    from ._pg_db import translate  # psycopg's, like ``conn``; its module imports this one

    done: list[Migration] = []
    with conn.transaction():
        conn.execute(translate(SQL_PG_MIGRATION_LOCK), (PG_MIGRATION_LOCK,))
        conn.execute(_PG_VERSION_TABLE)
        applied = {
            (row[0], row[1])
            for row in conn.execute("SELECT component, version FROM schema_migrations").fetchall()
        }
        refuse_newer_schema(applied, migrations)
        for migration in migrations:
            if (migration.component, migration.version) in applied:
                continue
            if "$$" in migration.sql:  # function bodies: the server splits the script itself
                conn.execute(migration.sql)
            else:
                for statement in split_statements(migration.sql):
                    conn.execute(statement)
            conn.execute(
                translate(SQL_RECORD_MIGRATION),
                (migration.component, migration.version, migration.name, time.time()),
            )
            done.append(migration)
    return done


def pyworkflow_migrations(dialect: str) -> list[Migration]:
    """pyworkflow's own migrations for ``dialect`` (``"sqlite"`` or ``"postgres"``), to apply
    before a component's own tracks when it shares the database (as the graph server does)."""
    if dialect not in ("sqlite", "postgres"):
        raise ValueError(f"dialect must be 'sqlite' or 'postgres', not {dialect!r}")
    return load_migrations("pyworkflow.store.migrations", dialect, "pyworkflow")
