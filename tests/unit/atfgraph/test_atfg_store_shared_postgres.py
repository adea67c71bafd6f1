"""Two graph stores on one PostgreSQL database, as two servers sharing it would have: every race
between them has one winner, and no traverser is handed to two workers. (Always on PostgreSQL,
whichever backend the rest of the suite runs on: sharing a database is what PostgreSQL is for.)"""

from __future__ import annotations

import asyncio
from collections.abc import AsyncIterator

import pytest

from atfgraph.server._refusals import Refusal
from atfgraph.server._store import GraphStore
from pyworkflow.store._pg_db import translate


@pytest.fixture
async def pair(pg_database: str) -> AsyncIterator[tuple[GraphStore, GraphStore]]:
    a = GraphStore(pg_database, lease_seconds=30)
    b = GraphStore(pg_database, lease_seconds=30)
    yield a, b
    a.close()
    b.close()


def test_sqlite_flavoured_sql_is_translated() -> None:
    assert translate("SELECT * FROM t WHERE a = ? AND b LIKE 'x%'") == (
        "SELECT * FROM t WHERE a = %s AND b LIKE 'x%%'"
    )
    assert (
        translate("SELECT id FROM t WHERE id = ? /*FOR UPDATE*/")
        == "SELECT id FROM t WHERE id = %s FOR UPDATE"
    )
    assert translate("SELECT id FROM t LIMIT ? /*FOR UPDATE SKIP LOCKED*/").endswith(
        "LIMIT %s FOR UPDATE SKIP LOCKED"
    )
    assert translate("SELECT 1 /* a comment */") == "SELECT 1 /* a comment */"


async def test_concurrent_claims_never_share_a_traverser(pair: tuple[GraphStore, GraphStore]) -> None:
    a, b = pair
    ids = {(await a.submit("n.skill", b"{}", max_attempts=1))[0]["id"] for _ in range(60)}
    wa = (await a.register_worker("n", "1", 100))["id"]
    wb = (await b.register_worker("n", "1", 100))["id"]

    async def drain(store: GraphStore, worker: str) -> list[str]:
        got: list[str] = []
        while True:
            tasks = await store.claim(worker, 3)
            if not tasks:
                return got
            got += [t["traverser"]["id"] for t in tasks]

    by_a, by_b = await asyncio.gather(drain(a, wa), drain(b, wb))
    assert not set(by_a) & set(by_b)
    assert sorted(by_a + by_b) == sorted(ids)
    assert all(a.get_traverser(i)["attempt"] == 1 for i in ids)


async def test_racing_decisions_have_one_winner_and_one_continuation(
    pair: tuple[GraphStore, GraphStore],
) -> None:
    a, b = pair
    for round_ in range(10):
        trav, _ = await a.submit("n.skill", b"{}", max_attempts=1)
        worker = (await a.register_worker("n", "1", 1))["id"]
        [task] = await a.claim(worker, 1)
        approval, paused = await a.request_approval(
            trav["id"], task["epoch"], f"k{round_}", b'"p"', None, None, True, []
        )
        assert paused
        outcomes = await asyncio.gather(
            a.decide(approval["id"], "approved", None, "alice"),
            b.decide(approval["id"], "rejected", None, "bob"),
            return_exceptions=True,
        )
        won = [o for o in outcomes if not isinstance(o, BaseException)]
        lost = [o for o in outcomes if isinstance(o, BaseException)]
        assert len(won) == 1 and len(lost) == 1, outcomes
        assert isinstance(lost[0], Refusal) and lost[0].code == "approval_decided"
        view = b.get_traverser(trav["id"])
        # One continuation: queued again with exactly one extra attempt.
        assert (view["status"], view["max_attempts"]) == ("queued", 2)
        assert b.get_approval(approval["id"])["status"] == won[0][0]["status"]
        await a.cancel(trav["id"])


async def test_racing_submissions_with_one_idempotency_key_make_one_traverser(
    pair: tuple[GraphStore, GraphStore],
) -> None:
    a, b = pair
    results = await asyncio.gather(
        *(store.submit("n.skill", b'{"x": 1}', 1, "same-key") for store in (a, b, a, b, a, b))
    )
    assert len({view["id"] for view, _ in results}) == 1
    assert [created for _, created in results].count(True) == 1
    with pytest.raises(Refusal) as conflict:
        await b.submit("n.skill", b'{"x": 2}', 1, "same-key")
    assert conflict.value.code == "idempotency_conflict"


async def test_racing_memory_writes_expecting_one_revision_have_one_winner(
    pair: tuple[GraphStore, GraphStore],
) -> None:
    a, b = pair
    for key in ("fresh", "existing"):
        expected = 0
        if key == "existing":
            expected = await a.save_memory("scope", key, b"0", None, None)
        outcomes = await asyncio.gather(
            *(
                s.save_memory("scope", key, f'"{i}"'.encode(), expected, None)
                for i, s in enumerate((a, b) * 3)
            ),
            return_exceptions=True,
        )
        won = [o for o in outcomes if not isinstance(o, BaseException)]
        assert won == [expected + 1], outcomes
        assert all(isinstance(o, Refusal) and o.code == "revision_conflict" for o in outcomes if o not in won)
        assert a.get_memory("scope", key)["revision"] == expected + 1


async def test_an_expired_lease_is_reaped_once_by_racing_sweepers(pg_database: str) -> None:
    a = GraphStore(pg_database, lease_seconds=0.05)
    b = GraphStore(pg_database, lease_seconds=0.05)
    try:
        worker = (await a.register_worker("n", "1", 10))["id"]
        ids = [(await a.submit("n.skill", b"{}", max_attempts=3))[0]["id"] for _ in range(20)]
        await a.heartbeat(worker, [], None)  # a worker that answers (claims skip a silent one)
        assert len(await a.claim(worker, 20)) == 20
        await asyncio.sleep(0.1)
        await asyncio.gather(a.sweep(), b.sweep(), a.sweep(), b.sweep())
        for ident in ids:
            view = a.get_traverser(ident)
            # Requeued once: the attempt was charged once, not once per sweeper.
            assert (view["status"], view["attempt"], view["max_attempts"]) == ("queued", 1, 3)
    finally:
        a.close()
        b.close()
