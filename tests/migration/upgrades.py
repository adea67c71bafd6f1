"""How the upgrade tests reach a database written before one of atfgraph's migrations: the graph
store opened with only the migrations older than it, on the temporary SQLite file or the new
PostgreSQL database ``location`` gives (``tests/migration/conftest.py``). Opening a
``GraphStore`` afterwards applies the rest. The same for pyworkflow's PostgreSQL store
(``pyworkflow_postgres_before``)."""

from __future__ import annotations

from collections.abc import Iterator
from contextlib import contextmanager

import pytest

import atfgraph.server._store as store_module
import pyworkflow.store._postgres as postgres_module
from atfgraph.server._store import GraphStore
from pyworkflow.store._postgres import PostgresStore


@contextmanager
def written_before(dialect: str, db: str, first_new: int, *, lease_seconds: float) -> Iterator[GraphStore]:
    """A graph store on ``db`` at the schema before atfgraph migration ``first_new``."""
    every = store_module.server_migrations
    before = [m for m in every(dialect) if not (m.component == "atfgraph" and m.version >= first_new)]
    missing = [m.version for m in every(dialect) if m not in before]
    assert min(missing) == first_new, f"atfgraph has no migration {first_new} on {dialect}"
    with pytest.MonkeyPatch.context() as patch:
        patch.setattr(store_module, "server_migrations", lambda d: before)
        old = GraphStore(db, lease_seconds=lease_seconds)
        try:
            yield old
        finally:
            old.close()


def pyworkflow_postgres_before(url: str, first_new: int) -> PostgresStore:
    """pyworkflow's PostgreSQL store on ``url`` at the schema before its migration ``first_new``
    (today's code: the test writes through it only what the older code wrote)."""
    every = postgres_module.pyworkflow_migrations()
    before = [m for m in every if m.version < first_new]
    assert next(m.version for m in every if m not in before) == first_new, (
        f"no pyworkflow migration {first_new}"
    )
    with pytest.MonkeyPatch.context() as patch:
        patch.setattr(postgres_module, "pyworkflow_migrations", lambda: before)
        return PostgresStore(url)
