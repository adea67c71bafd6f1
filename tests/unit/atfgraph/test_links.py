"""Decision links and webhooks in the service layer (``_service``, ``_links``): a link is used in
the transaction of its decision (a refused use undoes nothing but is audited; a decision that
fails leaves the link live), only a digest is stored, the signature check refuses every mismatch,
and the links' lookups use indexes. On a temporary SQLite file, or with
``PYWORKFLOW_TEST_STORE=postgresql`` a new PostgreSQL database."""

from __future__ import annotations

import hashlib
import os
import time
from typing import Any

import pytest

from atfgraph._json import dumps
from atfgraph.server import _links as links_sql
from atfgraph.server._hub import Hub
from atfgraph.server._identity import Principal, Role
from atfgraph.server._links import LinkKind, sign
from atfgraph.server._refusals import Conflict, Invalid, NotFound
from atfgraph.server._service import Service

ON_POSTGRES = os.environ.get("PYWORKFLOW_TEST_STORE", "sqlite") in ("postgresql", "postgres")
ALICE = Principal("t-alice", "alice", Role.REVIEWER)
OWNER = Principal("t-owner", "olga", Role.OWNER)


async def pending(service: Service, expires_in: float | None = None) -> dict[str, Any]:
    trav, _ = await service.submit(OWNER, "desk.refund", dumps({"amount": 480}), 3)
    approval, _, _ = await service.request_approval(
        OWNER, trav["id"], None, "refund", b'{"question":"ok?"}', None, expires_in, False
    )
    return approval


def audit(service: Service, target: str) -> list[tuple[Any, ...]]:
    sql = "SELECT principal, action, outcome FROM atfg_audit WHERE target = ? ORDER BY id"
    return [tuple(r) for r in service.store.db.read(lambda c: c.execute(sql, (target,)).fetchall())]


async def test_a_link_is_used_in_the_transaction_of_its_decision(service: Service) -> None:
    approval = await pending(service)
    link, secret = await service.mint_link(ALICE, LinkKind.PAGE, approval["id"], None, "ops")
    assert service.links.by_secret(secret) == link
    stored = service.store.db.read(lambda c: c.execute("SELECT digest FROM atfg_wait_links").fetchone())
    assert bytes(stored[0]) == hashlib.sha256(secret.encode()).digest()
    # The use is refused inside the decision's transaction (revoked meanwhile): nothing decided.
    await service.revoke_link(ALICE, link.id)
    with pytest.raises(Conflict) as refused:
        await service.decide(service.link_principal(link), approval["id"], "approved", None, link)
    assert refused.value.code == "link_used"
    assert service.store.get_approval(approval["id"])["status"] == "pending"
    # A live link whose decision is refused (not a decision) stays live.
    live, _ = await service.mint_link(ALICE, LinkKind.PAGE, approval["id"], 60, None)
    with pytest.raises(Invalid):
        await service.decide_by_link(live, "maybe", None)
    assert service.links.get(live.id).state(time.time()).value == "live"
    decided = await service.decide_by_link(live, "rejected", None)
    assert (decided["status"], decided["decided_by"]) == ("rejected", f"link:{live.id}")
    used = service.links.get(live.id)
    assert (used.state(time.time()).value, used.decision) == ("used", "rejected")
    with pytest.raises(Conflict) as again:
        await service.decide_by_link(used, "rejected", None)
    assert again.value.code == "link_used"
    assert ("link:" + live.id, "approval.decide", "allowed") in audit(service, approval["id"])
    assert ("link:" + live.id, "approval.decide", "refused") in audit(service, approval["id"])
    assert ("alice", "approval.link.revoke", "allowed") in audit(service, link.id)


async def test_a_link_never_outlives_its_approval_and_is_refused_on_other_waits(service: Service) -> None:
    approval = await pending(service, expires_in=30)
    link, _ = await service.mint_link(ALICE, LinkKind.PAGE, approval["id"], 3600, None)
    assert link.expires_at <= approval["expires_at"] + 0.001
    with pytest.raises(NotFound):
        await service.mint_link(ALICE, LinkKind.PAGE, "nope", None, None)
    for bad in (0.0, -1.0, 31 * 86400.0):
        with pytest.raises(Invalid):
            await service.mint_link(ALICE, LinkKind.PAGE, approval["id"], bad, None)
    assert service.links.by_secret("x" * 10_000) is None
    assert service.links.by_secret(link.id + "_" + "A" * 32) is None


async def test_webhook_signatures(service: Service) -> None:
    approval = await pending(service)
    hook, secret = await service.mint_link(ALICE, LinkKind.WEBHOOK, approval["id"], None, None)
    # Derived, not stored: the same on every call (and every server on the database).
    assert secret == await Service(service.store, service.identity, Hub()).links.webhook_secret(hook.id)
    assert secret not in service.store.db.read(
        lambda c: repr(c.execute("SELECT * FROM atfg_wait_links").fetchall())
    )
    body, now = b'{"decision":"approved"}', time.time()
    ts = str(int(now))
    good = "sha256=" + sign(secret, ts, body)
    verify = service.links.verify_webhook
    assert await verify(hook.id, ts, good, body, now) == hook
    assert await verify(hook.id, ts, good, body + b" ", now) is None
    assert await verify(hook.id, ts, good.upper(), body, now) is None
    assert (
        await verify(
            hook.id, str(int(now) - 301), "sha256=" + sign(secret, str(int(now) - 301), body), body, now
        )
        is None
    )
    assert await verify(hook.id, None, good, body, now) is None
    assert await verify(hook.id, ts, None, body, now) is None
    assert await verify(hook.id, "1e9", good, body, now) is None
    assert await verify("0" * 16, ts, good, body, now) is None
    page, _ = await service.mint_link(ALICE, LinkKind.PAGE, approval["id"], None, None)
    assert (
        await verify(
            page.id, ts, "sha256=" + sign(await service.links.webhook_secret(page.id), ts, body), body, now
        )
        is None
    )


async def test_link_lookups_use_indexes(service: Service) -> None:
    db = service.store.db
    for sql in (links_sql.SQL_LINK, links_sql.SQL_LINKS_OF):
        if ON_POSTGRES:

            def explain(c: Any, q: str = sql) -> list[str]:
                c.execute("SET LOCAL enable_seqscan = off")
                return [str(r[0]) for r in c.execute("EXPLAIN " + q, ("a",)).fetchall()]

            plan = db.read(explain)
            assert not [line for line in plan if "Seq Scan" in line], plan
        else:
            plan = db.read(lambda c, q=sql: c.execute("EXPLAIN QUERY PLAN " + q, ("a",)).fetchall())
            details = [str(row[-1]) for row in plan]
            assert any("INDEX" in d or "PRIMARY KEY" in d for d in details), details
