"""PostgreSQL migrations: processes that open a new database at the same moment serialize on the
advisory lock; the schema is built once and equals the one a lone migrator builds."""

from __future__ import annotations

from collections.abc import Iterator
from typing import Any

import psycopg
import pytest
from racing import run_at_once

from pyworkflow.store import pyworkflow_migrations

pytestmark = pytest.mark.postgres

_OPEN_AT = """
import sys, time
from pyworkflow.store import open_store
start = float(sys.argv[2])
while time.time() < start:
    pass
open_store(sys.argv[1]).close()
print("ok")
"""


def _schema(url: str) -> dict[str, Any]:
    with psycopg.connect(url) as conn:
        columns = conn.execute(
            "SELECT table_name, column_name, data_type, is_nullable, column_default"
            " FROM information_schema.columns WHERE table_schema = 'public'"
            " ORDER BY table_name, column_name"
        ).fetchall()
        indexes = conn.execute(
            "SELECT tablename, indexname, indexdef FROM pg_indexes WHERE schemaname = 'public'"
            " ORDER BY tablename, indexname"
        ).fetchall()
        versions = conn.execute(
            "SELECT component, version, name FROM schema_migrations ORDER BY component, version"
        ).fetchall()
    return {"columns": columns, "indexes": indexes, "versions": versions}


@pytest.fixture
def second_database(pg_database: str) -> Iterator[str]:
    """Another empty database next to ``pg_database`` (its URL with a suffixed name)."""
    name = pg_database.rsplit("/", 1)[1] + "_b"
    admin = pg_database.rsplit("/", 1)[0] + "/postgres"
    with psycopg.connect(admin, autocommit=True) as conn:
        conn.execute(f'CREATE DATABASE "{name}"')
    try:
        yield pg_database.rsplit("/", 1)[0] + f"/{name}"
    finally:
        with psycopg.connect(admin, autocommit=True) as conn:
            conn.execute(f'DROP DATABASE IF EXISTS "{name}" WITH (FORCE)')


def test_concurrent_migrators_build_the_schema_once(pg_database: str, second_database: str) -> None:
    # Every process is imported and spinning before it opens the store.
    for code, out, err in run_at_once(_OPEN_AT, pg_database):
        assert code == 0 and out.strip() == "ok", err
    raced = _schema(pg_database)
    expected_versions = [("pyworkflow", m.version, m.name) for m in pyworkflow_migrations("postgres")]
    assert raced["versions"] == expected_versions  # each migration recorded exactly once
    # A lone migrator builds exactly the same schema.
    from pyworkflow.store import open_store

    open_store(second_database).close()
    alone = _schema(second_database)
    assert raced == alone
    tables = {c[0] for c in raced["columns"]}
    assert {"runs", "events", "steps", "waits", "wait_tokens", "checkpoints", "queue"} <= tables


def test_reopening_applies_nothing(pg_database: str) -> None:
    from pyworkflow.store import apply_postgres_migrations, open_store

    open_store(pg_database).close()
    with psycopg.connect(pg_database, autocommit=True) as conn:
        assert apply_postgres_migrations(conn, pyworkflow_migrations("postgres")) == []
    assert [v[1] for v in _schema(pg_database)["versions"]] == [
        m.version for m in pyworkflow_migrations("postgres")
    ]


def test_a_database_upgraded_by_a_newer_version_is_refused_and_left_alone(pg_database: str) -> None:
    from pyworkflow import ConfigurationError
    from pyworkflow.store import open_store

    open_store(pg_database).close()
    newest = pyworkflow_migrations("postgres")[-1].version
    with psycopg.connect(pg_database, autocommit=True) as conn:
        conn.execute(
            "INSERT INTO schema_migrations VALUES ('pyworkflow', %s, 'from_the_future', 0)", (newest + 1,)
        )
    before = _schema(pg_database)
    with pytest.raises(
        ConfigurationError, match=rf"pyworkflow schema {newest + 1}; this version knows up to {newest}"
    ):
        open_store(pg_database)
    assert _schema(pg_database) == before
