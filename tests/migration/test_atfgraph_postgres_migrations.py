"""The graph server's schema on PostgreSQL: four processes opening one new database at the same
moment build it once (advisory lock), and it has the same tables, columns and indexes as the
SQLite schema, so the two dialects cannot drift apart unnoticed."""

from __future__ import annotations

import sqlite3
from pathlib import Path

import psycopg
from racing import run_at_once

from atfgraph.server._store import GraphStore

_OPEN_AT = """
import sys, time
from atfgraph.server._store import GraphStore
start = float(sys.argv[2])
while time.time() < start:
    pass
GraphStore(sys.argv[1]).close()
print("ok")
"""


def test_racing_servers_build_the_schema_once(pg_database: str) -> None:
    for code, out, err in run_at_once(_OPEN_AT, pg_database, lead=2.0):
        assert code == 0 and out.strip() == "ok", err
    with psycopg.connect(pg_database) as conn:
        rows = conn.execute(
            "SELECT component, version, count(*) FROM schema_migrations GROUP BY 1, 2"
        ).fetchall()
    assert {component for component, _, _ in rows} == {"pyworkflow", "atfgraph", "atfgraph_identity"}
    assert all(count == 1 for _, _, count in rows)


def _sqlite_tables(path: Path) -> dict[str, set[str]]:
    conn = sqlite3.connect(path)
    try:
        names = [r[0] for r in conn.execute("SELECT name FROM sqlite_master WHERE type = 'table'")]
        return {
            n: {c[1] for c in conn.execute(f"PRAGMA table_info({n})")} for n in names if n.startswith("atfg_")
        }
    finally:
        conn.close()


def _sqlite_indexes(path: Path) -> set[str]:
    conn = sqlite3.connect(path)
    try:
        rows = conn.execute(
            "SELECT name FROM sqlite_master"
            " WHERE type = 'index' AND tbl_name LIKE 'atfg_%' AND sql IS NOT NULL"
        )
        return {r[0] for r in rows}
    finally:
        conn.close()


def test_postgres_and_sqlite_schemas_match(pg_database: str, tmp_path: Path) -> None:
    GraphStore(pg_database).close()
    GraphStore(str(tmp_path / "g.db")).close()
    with psycopg.connect(pg_database) as conn:
        columns = conn.execute(
            "SELECT table_name, column_name FROM information_schema.columns"
            " WHERE table_schema = 'public' AND table_name LIKE 'atfg%'"
        ).fetchall()
        # Explicit indexes only (SQLite's automatic ones for keys and UNIQUE have no SQL).
        indexes = {
            r[0]
            for r in conn.execute(
                "SELECT indexname FROM pg_indexes WHERE schemaname = 'public' AND tablename LIKE 'atfg%'"
                " AND indexname NOT LIKE '%_pkey' AND indexname NOT LIKE '%_key'"
            )
        }
    pg_tables: dict[str, set[str]] = {}
    for table, column in columns:
        pg_tables.setdefault(table, set()).add(column)
    assert pg_tables == _sqlite_tables(tmp_path / "g.db")
    assert indexes == _sqlite_indexes(tmp_path / "g.db")
