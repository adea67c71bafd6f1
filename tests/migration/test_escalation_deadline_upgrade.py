"""The escalation's own deadline (atfgraph migration 0012 on SQLite, 0014 on PostgreSQL): a
database written before it, with an approval waiting to escalate, keeps that escalation when the
server opens it. Before, the approval's wait carried the escalation's deadline; after, the
assignment does (``escalate_at``) and the wait has the deadline it has if the escalation comes on
time, so that no expiry of the engine's pre-empts it. On a temporary SQLite file and on a new
PostgreSQL database."""

from __future__ import annotations

import time
from typing import Any

import pytest
from upgrades import written_before

from atfgraph._json import dumps
from atfgraph.server._assign import read_assignment
from atfgraph.server._hub import Hub
from atfgraph.server._identity import Identity, Principal, Role
from atfgraph.server._service import Service
from atfgraph.server._store import GraphStore
from pyworkflow.store import WaitStatus

OWNER = Principal("t-owner", "olga", Role.OWNER)
WORKER = Principal("t-worker", "w1", Role.WORKER)
#: the first atfgraph migration of each dialect with the escalation's own deadline
NEW = {"sqlite": 12, "postgres": 14}
#: how an assignment with a pending escalation was written before it
OLD_INSERT = (
    "INSERT INTO atfg_assignments (wait_id, roles, principals, escalate, escalations) VALUES (?, '[]',"
    """ '["rita"]', '{"roles": [], "principals": ["boss"], "expires_in_seconds": 600}', 0)"""
)


async def test_a_pending_escalation_written_before_the_migration_escalates_after_it(
    location: tuple[str, str], monkeypatch: pytest.MonkeyPatch
) -> None:
    dialect, db = location
    with written_before(dialect, db, NEW[dialect], lease_seconds=5) as old:
        service = Service(old, Identity(old.db), Hub())
        trav, _ = await service.submit(OWNER, "desk.refund", dumps({"amount": 480}), 3)
        worker = (await old.register_worker("desk", "1", 1))["id"]
        task = (await old.claim(worker, 1))[0]
        approval, _, _ = await service.request_approval(
            WORKER, trav["id"], task["epoch"], "refund", b'{"question":"ok?"}', None, 60, True
        )
        first_deadline = approval["expires_at"]
        await old.db.write(lambda conn: conn.execute(OLD_INSERT, (approval["id"],)))

    store = GraphStore(db, lease_seconds=5)  # applies the new migration
    try:
        assignment: Any = store.db.read(lambda c: read_assignment(c, approval["id"]))
        assert assignment["escalates_at"] == pytest.approx(first_deadline)
        wait = await store.pyworkflow.get_wait(approval["id"])
        assert wait is not None and wait.expires_at == pytest.approx(first_deadline + 600)
        assert await store.pyworkflow.expire_due_waits(now=first_deadline + 1) == 0
        monkeypatch.setattr(time, "time", lambda: first_deadline + 1)
        await store.sweep()
        monkeypatch.undo()
        assignment = store.db.read(lambda c: read_assignment(c, approval["id"]))
        assert (assignment["principals"], assignment["escalations"]) == (["boss"], 1)
        wait = await store.pyworkflow.get_wait(approval["id"])
        assert wait is not None and wait.status == WaitStatus.PENDING
    finally:
        store.close()
