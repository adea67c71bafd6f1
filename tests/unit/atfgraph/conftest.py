"""Fixtures of the graph store's unit tests: where the store lives (a SQLite file, or with
``PYWORKFLOW_TEST_STORE=postgresql`` a new PostgreSQL database) and a store or a service on it.
A module that needs another lease length defines its own ``store`` or ``service``."""

from __future__ import annotations

import os
from collections.abc import AsyncIterator
from pathlib import Path

import pytest

from atfgraph.server._hub import Hub
from atfgraph.server._identity import Identity
from atfgraph.server._service import Service
from atfgraph.server._store import GraphStore

ON_POSTGRES = os.environ.get("PYWORKFLOW_TEST_STORE", "sqlite") in ("postgresql", "postgres")


@pytest.fixture
def location(tmp_path: Path, request: pytest.FixtureRequest) -> str:
    """Where the store under test lives: a SQLite file, or a new PostgreSQL database."""
    if ON_POSTGRES:
        return str(request.getfixturevalue("pg_database"))
    return str(tmp_path / "g.db")


@pytest.fixture
async def store(location: str) -> AsyncIterator[GraphStore]:
    """The graph store, with a lease far longer than any test step (these tests' workers never
    heartbeat, and one silent for a few leases gets no claims)."""
    s = GraphStore(location, lease_seconds=30.0)
    yield s
    s.close()


@pytest.fixture
async def service(location: str) -> AsyncIterator[Service]:
    """The service layer on a store with 5-second leases, its identity and a hub."""
    store = GraphStore(location, lease_seconds=5)
    yield Service(store, Identity(store.db), Hub())
    store.close()
