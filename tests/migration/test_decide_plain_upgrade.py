"""A decision without its terms read (atfgraph migration postgres 0018, ``atfg_decide_plain``): on
a PostgreSQL database written before it, approvals created by the older code are decided by the
new one, a plain one without a read of its terms first, an assigned one with its assignees
checked. (SQLite has no such migration: its decisions read the terms, which cost no round trip.)"""

from __future__ import annotations

import pytest
from upgrades import written_before

from atfgraph._json import dumps
from atfgraph.server._assign import Assignees
from atfgraph.server._hub import Hub
from atfgraph.server._identity import Identity, Principal, Role
from atfgraph.server._refusals import Forbidden
from atfgraph.server._service import Service
from atfgraph.server._store import GraphStore
from counted import counted_calls

OWNER = Principal("t-owner", "olga", Role.OWNER)
ALICE = Principal("t-alice", "alice", Role.REVIEWER)


def _has_decide_plain(store: GraphStore) -> bool:
    sql = "SELECT count(*) FROM pg_proc WHERE proname = 'atfg_decide_plain'"
    return bool(store.db.read(lambda c: c.execute(sql).fetchone())[0])  # type: ignore[index]


async def test_approvals_written_before_the_migration_are_decided_after_it(
    pg_database: str, monkeypatch: pytest.MonkeyPatch
) -> None:
    with written_before("postgres", pg_database, 18, lease_seconds=5) as old:
        assert not _has_decide_plain(old)
        service = Service(old, Identity(old.db), Hub())
        trav, _ = await service.submit(OWNER, "desk.refund", dumps({"amount": 480}), 3)
        plain, _, _ = await service.request_approval(
            OWNER, trav["id"], None, "plain", b'"ok?"', None, None, False
        )
        assigned, _, _ = await service.request_approval(
            OWNER,
            trav["id"],
            None,
            "assigned",
            b'"ok?"',
            None,
            None,
            False,
            assign_to=Assignees((), ("rita",)),
        )

    store = GraphStore(pg_database, lease_seconds=5)  # applies 0018
    try:
        assert _has_decide_plain(store)
        service = Service(store, Identity(store.db), Hub())
        reads = counted_calls(monkeypatch, store, "decision_terms")
        assert (await service.decide(ALICE, plain["id"], "approved", None))["status"] == "approved"
        assert reads == []
        with pytest.raises(Forbidden):
            await service.decide(ALICE, assigned["id"], "approved", None)
        assert store.get_approval(assigned["id"])["status"] == "pending" and reads == [assigned["id"]]
    finally:
        store.close()
