"""Fixtures of the PostgreSQL-only contract tests (the group commit, LISTEN/NOTIFY)."""

from __future__ import annotations

from collections.abc import Iterator

import pytest

from pyworkflow.store import PostgresStore, open_store


@pytest.fixture
def pg_store(pg_database: str) -> Iterator[PostgresStore]:
    """A PostgreSQL store on a new database, closed after the test."""
    store = open_store(pg_database)
    assert isinstance(store, PostgresStore)
    try:
        yield store
    finally:
        store.close()
