"""The runs' index by idempotency key holds the keyed runs only (pyworkflow migration sqlite 0008
and postgres 0020; atfgraph postgres 0017 names its condition in the submission's insert): on a
database written before, keyed submissions keep answering with the traverser they created first,
a key used for another submission is still refused, and unkeyed ones go on. (Lookups by key
use the partial index: tests/unit/atfgraph/test_atfg_store.py checks the plans of the graph
store's statements on both dialects.)"""

from __future__ import annotations

from typing import Any

import pytest
from upgrades import graph_store_before_pyworkflow

from atfgraph.server._errors import Conflict
from atfgraph.server._store import GraphStore

NEW = {"sqlite": 8, "postgres": 20}


def _index(store: GraphStore) -> str:
    if store.is_postgres:
        sql = "SELECT indexdef FROM pg_indexes WHERE indexname = 'runs_by_idempotency_key'"
    else:
        sql = "SELECT sql FROM sqlite_master WHERE name = 'runs_by_idempotency_key'"
    return str(store.db.read(lambda c: c.execute(sql).fetchone())[0])  # type: ignore[index]


def _runs(store: GraphStore) -> int:
    return int(store.db.read(lambda c: c.execute("SELECT count(*) FROM runs").fetchone())[0])  # type: ignore[index]


async def _submit(
    store: GraphStore, key: str | None, body: bytes = b'{"n": 1}'
) -> tuple[dict[str, Any], bool]:
    return await store.submit("n.skill", body, max_attempts=1, idempotency_key=key)


async def test_keyed_submissions_written_before_the_migration_answer_the_same_after_it(
    location: tuple[str, str],
) -> None:
    dialect, db = location
    with graph_store_before_pyworkflow(dialect, db, NEW[dialect], lease_seconds=30) as old:
        assert "IS NOT NULL" not in _index(old)  # every run had an entry
        first, created = await _submit(old, "order-1")
        assert created
        await _submit(old, None)
        await _submit(old, None)
        assert _runs(old) == 3

    store = GraphStore(db, lease_seconds=30)  # applies the rest
    try:
        assert "idempotency_key IS NOT NULL" in _index(store)  # the keyed runs only
        again, created = await _submit(store, "order-1")
        assert not created and again["id"] == first["id"]
        with pytest.raises(Conflict):
            await _submit(store, "order-1", b'{"n": 2}')
        second, created = await _submit(store, "order-2")
        assert created and second["id"] != first["id"]
        assert (await _submit(store, "order-2"))[0]["id"] == second["id"]
        await _submit(store, None)
        assert _runs(store) == 5  # three before, order-2 and one more without a key
    finally:
        store.close()
