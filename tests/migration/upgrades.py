"""How the upgrade tests reach a database written before one of atfgraph's or pyworkflow's
migrations: the graph store opened with only the migrations older than it, on the temporary
SQLite file or the new PostgreSQL database ``location`` gives (``tests/migration/conftest.py``).
Opening a ``GraphStore`` afterwards applies the rest. The same for pyworkflow's PostgreSQL store
alone (``pyworkflow_postgres_before``)."""

from __future__ import annotations

from collections.abc import Iterator
from contextlib import contextmanager

import pytest

import atfgraph.server._store as store_module
import pyworkflow.store._postgres as postgres_module
from atfgraph.server._store import GraphStore
from pyworkflow.store import Migration
from pyworkflow.store._postgres import PostgresStore

#: pyworkflow migrations released with an atfgraph one that its functions need (dialect: {(atfgraph
#: version, pyworkflow version)}): a database from before the atfgraph migration is from before the
#: pyworkflow one too. PostgreSQL's runs_by_idempotency_key holds the keyed runs only since
#: pyworkflow 20, which the submission function before atfgraph 17 cannot insert against. On
#: SQLite atfgraph 15 makes again the index of the queue that pyworkflow 9's rebuild dropped.
RELEASED_TOGETHER: dict[str, set[tuple[int, int]]] = {"postgres": {(17, 20)}, "sqlite": {(15, 9)}}


@contextmanager
def _graph_store_before(
    dialect: str, db: str, atfgraph_new: int | None, pyworkflow_new: int | None, lease_seconds: float
) -> Iterator[GraphStore]:
    """A graph store on ``db`` without atfgraph's migrations from ``atfgraph_new`` and
    pyworkflow's from ``pyworkflow_new`` on (None: that component's are all applied)."""

    def newer(m: Migration, component: str, first: int | None) -> bool:
        return m.component == component and first is not None and m.version >= first

    before = [
        m
        for m in store_module.server_migrations(dialect)
        if not newer(m, "atfgraph", atfgraph_new) and not newer(m, "pyworkflow", pyworkflow_new)
    ]
    with pytest.MonkeyPatch.context() as patch:
        patch.setattr(store_module, "server_migrations", lambda d: before)
        # The graph store's own pyworkflow store (PostgreSQL) applies pyworkflow's track too.
        ours = [m for m in before if m.component == "pyworkflow"]
        patch.setattr(postgres_module, "pyworkflow_migrations", lambda: ours)
        old = GraphStore(db, lease_seconds=lease_seconds)
        try:
            yield old
        finally:
            old.close()


def _versions(dialect: str, component: str) -> list[int]:
    return [m.version for m in store_module.server_migrations(dialect) if m.component == component]


@contextmanager
def written_before(dialect: str, db: str, first_new: int, *, lease_seconds: float) -> Iterator[GraphStore]:
    """A graph store on ``db`` at the schema before atfgraph migration ``first_new`` (and before
    the pyworkflow migrations released with it or later, ``RELEASED_TOGETHER``)."""
    assert first_new in _versions(dialect, "atfgraph"), f"atfgraph has no migration {first_new} on {dialect}"
    ours = min((o for theirs, o in RELEASED_TOGETHER[dialect] if theirs >= first_new), default=None)
    with _graph_store_before(dialect, db, first_new, ours, lease_seconds) as old:
        yield old


@contextmanager
def graph_store_before_pyworkflow(
    dialect: str, db: str, first_new: int, *, lease_seconds: float
) -> Iterator[GraphStore]:
    """A graph store on ``db`` at the schema before pyworkflow migration ``first_new`` (and the
    atfgraph migrations released with it, ``RELEASED_TOGETHER``)."""
    assert first_new in _versions(dialect, "pyworkflow"), (
        f"pyworkflow has no migration {first_new} on {dialect}"
    )
    theirs = min((t for t, ours in RELEASED_TOGETHER[dialect] if ours == first_new), default=None)
    with _graph_store_before(dialect, db, theirs, first_new, lease_seconds) as old:
        yield old


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
