"""The checkpoint history without its latest revision (atfgraph migration 0013 on SQLite, 0016 on
PostgreSQL): a database written before it, whose history table holds a copy of every revision
(the latest too), reads the same history after it, holds no copy of a checkpoint's row any more,
and keeps the last 20 revisions of later saves. On a temporary SQLite file and on a new PostgreSQL
database."""

from __future__ import annotations

from typing import Any

from upgrades import written_before

from atfgraph._json import dumps
from atfgraph.server._store import GraphStore
from pyworkflow.store import write_checkpoint

#: the first atfgraph migration of each dialect that keeps the latest revision out of the history
NEW = {"sqlite": 13, "postgres": 16}


def _value(n: int) -> bytes:
    return dumps({"n": n, "items": list(range(n % 4))})


def _kept(store: GraphStore, run_id: str) -> dict[tuple[str, str], list[tuple[int, Any]]]:
    history, cut = store.console_checkpoint_history(run_id)
    assert not cut
    return {k: [(r["revision"], r["value"]) for r in v] for k, v in history.items()}


def _copies(store: GraphStore, run_id: str) -> list[tuple[str, int]]:
    sql = "SELECT scope, revision FROM atfg_checkpoint_revisions WHERE run_id = ? ORDER BY scope, revision"
    return [(r[0], r[1]) for r in store.db.read(lambda c: c.execute(sql, (run_id,)).fetchall())]


async def test_a_history_written_before_the_migration_reads_the_same_after_it(
    location: tuple[str, str],
) -> None:
    dialect, db = location
    with written_before(dialect, db, NEW[dialect], lease_seconds=30) as old:
        worker = (await old.register_worker("n", "1.0", 1))["id"]
        trav, _ = await old.submit("n.skill", b"{}", max_attempts=1)
        (task,) = await old.claim(worker, 1)
        run_id = str(trav["id"])
        for n in range(1, 26):
            assert await old.save_checkpoint(run_id, task["epoch"], "plan", _value(n), n - 1, []) == n
        await old.db.write(lambda c: write_checkpoint(c, run_id, "step#1", "draft", b'{"v": 1}', 0, 1.0))
        # The old triggers: the last 20 revisions of "plan" (25 among them) and "draft"'s only one.
        assert _copies(old, run_id) == [("", n) for n in range(6, 26)] + [("step#1", 1)]

    store = GraphStore(db, lease_seconds=30)  # applies the new migration
    try:
        expected = {
            ("", "plan"): [(n, {"n": n, "items": list(range(n % 4))}) for n in range(25, 5, -1)],
            ("step#1", "draft"): [(1, {"v": 1})],
        }
        assert _kept(store, run_id) == expected
        assert _copies(store, run_id) == [("", n) for n in range(6, 25)]  # no copy of a row
        # A later save: the replaced revision is copied, the oldest goes, 20 are kept.
        assert await store.save_checkpoint(run_id, task["epoch"], "plan", _value(26), 25, []) == 26
        kept = _kept(store, run_id)[("", "plan")]
        assert [r for r, _ in kept] == list(range(26, 6, -1)) and kept[0][1] == {"n": 26, "items": [0, 1]}
        assert _copies(store, run_id) == [("", n) for n in range(7, 26)]
        # Deleted with its checkpoint.
        await store.db.write(lambda c: c.execute("DELETE FROM checkpoints WHERE run_id = ?", (run_id,)))
        assert _kept(store, run_id) == {} and _copies(store, run_id) == []
    finally:
        store.close()
