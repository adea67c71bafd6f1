"""The notifications outbox (``_notify``, atfgraph migration sqlite 0008 / postgres 0009): the
trigger writes an event in the transaction that creates a wait a person answers (approvals,
hooks, step hooks; not timers), so a wait that rolled back has none; the notifier expands events
into one delivery per endpoint (draining the outbox when there is none); back-off doubles; the
notifier's reads use indexes. On a temporary SQLite file, or with
``PYWORKFLOW_TEST_STORE=postgresql`` a new PostgreSQL database."""

from __future__ import annotations

import os
import time
from typing import Any

import httpx
import orjson
import pytest

from atfgraph._json import dumps
from atfgraph.server import _notify
from atfgraph.server._graph_rows import _row
from atfgraph.server._graph_sql import SQL_INSERT_APPROVAL
from atfgraph.server._identity import Principal, Role
from atfgraph.server._notify import Notifier, NotifySettings, backoff, event_body
from atfgraph.server._service import Service
from pyworkflow.store import NewWait, WaitKind

ON_POSTGRES = os.environ.get("PYWORKFLOW_TEST_STORE", "sqlite") in ("postgresql", "postgres")
OWNER = Principal("t-owner", "olga", Role.OWNER)


def events(service: Service) -> list[str]:
    rows = service.store.db.read(
        lambda c: c.execute("SELECT wait_id FROM atfg_wait_events ORDER BY seq").fetchall()
    )
    return [r[0] for r in rows]


async def test_the_outbox_is_written_with_the_wait_and_only_for_waits_people_answer(service: Service) -> None:
    trav, _ = await service.submit(OWNER, "desk.refund", dumps({"amount": 480}), 3)
    approval, _, _ = await service.request_approval(OWNER, trav["id"], None, "k", b'"ok?"', None, None, False)
    assert events(service) == [approval["id"]]

    class Boom(Exception):
        pass

    def rolled_back(conn: Any) -> None:
        conn.execute(
            SQL_INSERT_APPROVAL, ("gone", trav["id"], "k2", "k2", time.time(), None, b'"x"', None, None)
        )
        raise Boom

    with pytest.raises(Boom):
        await service.store.db.write(rolled_back)
    assert events(service) == [approval["id"]]

    store = service.store.pyworkflow
    now = time.time()
    claim = await store.create_run("run-1", "tests:wf", b"{}", now=now, lease_owner="me", lease_ttl=30)
    assert claim is not None
    await store.create_wait(
        claim.fence, NewWait("h1", "h#1", WaitKind.HOOK, "approve", "", b"d", None, None), now=now
    )
    await store.create_wait(
        claim.fence, NewWait("t1", "t#1", WaitKind.TIMER, "sleep", "", None, now + 60, None), now=now
    )
    assert events(service) == [approval["id"], "h1"]


async def test_events_become_one_delivery_per_endpoint_or_are_drained(service: Service) -> None:
    trav, _ = await service.submit(OWNER, "desk.refund", dumps({}), 3)
    approval, _, _ = await service.request_approval(
        OWNER, trav["id"], None, "k", b'{"question": "ok?"}', None, None, False
    )
    # Endpoints nobody listens on: a pass records one failed attempt each, with the back-off.
    settings = NotifySettings(endpoints=("http://127.0.0.1:9/a", "http://127.0.0.1:9/b"), max_attempts=2,
                              backoff_seconds=60, timeout_seconds=2)  # fmt: skip
    notifier = Notifier(service.store.db, settings, "https://review.example.com")
    async with httpx.AsyncClient(timeout=2) as http:
        notifier._http = http
        assert await notifier.pass_once() == 2
        assert events(service) == []
        pending = notifier.list("pending", 10)
        assert sorted(d["endpoint"] for d in pending) == list(settings.endpoints)
        assert all(
            d["attempts"] == 1 and d["last_error"] and d["next_at"] > time.time() + 50 for d in pending
        )
        assert await notifier.pass_once() == 0  # nothing is due before its back-off
    assert notifier.list("dead", 10) == []
    # No endpoint configured: the outbox is drained and nothing is sent.
    await service.request_approval(OWNER, trav["id"], None, "k2", b'"again?"', None, None, False)
    quiet = Notifier(service.store.db, NotifySettings(), "http://x")
    assert await quiet.pass_once() == 0 and events(service) == []
    assert len(notifier.list("pending", 10)) == 2

    row = service.store.db.read(lambda c: _row(c, _notify.SQL_WAIT, (approval["id"],)))
    body = orjson.loads(event_body(row, "https://review.example.com"))
    assert (
        body["text"]
        == f"Approval requested on desk.refund: ok? (https://review.example.com/runs/{trav['id']})"
    )
    assert body["wait"]["prompt"] == {"question": "ok?"}


async def test_a_pass_with_nothing_to_do_is_one_read(service: Service) -> None:
    """No event in the outbox and no delivery due: a pass (every poll_seconds) writes nothing; it
    was a transaction each time. An event makes the next pass write again."""
    db = service.store.db
    notifier = Notifier(db, NotifySettings(), "http://x")  # no endpoint: events are drained
    before = db.commits + db.groups
    assert await notifier.pass_once() == 0
    assert db.commits + db.groups == before
    trav, _ = await service.submit(OWNER, "desk.refund", dumps({}), 3)
    await service.request_approval(OWNER, trav["id"], None, "k", b'"ok?"', None, None, False)
    assert events(service) != []
    before = db.commits + db.groups
    assert await notifier.pass_once() == 0 and events(service) == []
    assert db.commits + db.groups == before + 1


async def test_a_pass_keeps_up_with_more_than_a_batch_deleting_each_batch_at_once(
    service: Service, monkeypatch: pytest.MonkeyPatch
) -> None:
    """A pass drained one batch (50 events) every poll_seconds: 100 approvals a second at most,
    fewer than a busy server creates, so the outbox grew. It goes on while a batch was full, and
    deletes a batch's events in one statement (it was one statement, one round trip on
    PostgreSQL, per event, inside the writer's transaction)."""
    monkeypatch.setattr(_notify, "BATCH", 4)
    trav, _ = await service.submit(OWNER, "desk.refund", dumps({}), 3)
    for i in range(10):
        await service.request_approval(OWNER, trav["id"], None, f"k{i}", b'"ok?"', None, None, False)
    assert len(events(service)) == 10
    deletes: list[str] = []
    real = _notify.sql_drop_events

    def counted(count: int) -> str:
        deletes.append(real(count))
        return deletes[-1]

    monkeypatch.setattr(_notify, "sql_drop_events", counted)
    quiet = Notifier(service.store.db, NotifySettings(), "http://x")  # no endpoint: drained
    assert await quiet.pass_once() == 0
    assert events(service) == []
    assert [d.count("?") for d in deletes] == [4, 4, 2]
    # Deliveries too: 10 due with an endpoint nobody listens on, sent in one pass (4 + 4 + 2).
    for i in range(10):
        await service.request_approval(OWNER, trav["id"], None, f"d{i}", b'"ok?"', None, None, False)
    settings = NotifySettings(endpoints=("http://127.0.0.1:9/a",), backoff_seconds=60, timeout_seconds=2)
    notifier = Notifier(service.store.db, settings, "http://x")
    async with httpx.AsyncClient(timeout=2) as http:
        notifier._http = http
        assert await notifier.pass_once() == 10
    assert len(notifier.list("pending", 20)) == 10 and events(service) == []
    # A pass stops after PASS_BATCHES full batches; the next pass goes on.
    monkeypatch.setattr(_notify, "PASS_BATCHES", 2)
    for i in range(10):
        await service.request_approval(OWNER, trav["id"], None, f"e{i}", b'"ok?"', None, None, False)
    assert await quiet.pass_once() == 0 and len(events(service)) == 2
    assert await quiet.pass_once() == 0 and events(service) == []


def test_backoff_doubles_up_to_an_hour() -> None:
    s = NotifySettings(backoff_seconds=2)
    assert [backoff(s, n) for n in (1, 2, 3, 4)] == [2, 4, 8, 16]
    assert backoff(s, 40) == 3600


async def test_notifier_reads_use_indexes(service: Service) -> None:
    db = service.store.db
    for sql, params in (
        (_notify.SQL_DUE, (1.0, 10)),
        (_notify.SQL_DELIVERIES.format(where="", order=" ORDER BY created_at DESC, id DESC"), ("dead", 10)),
        (_notify.SQL_EVENTS, (10,)),
        (_notify.SQL_NOTIFY_DUE, (1.0,)),
    ):
        if ON_POSTGRES:

            def explain(c: Any, q: str = sql, p: tuple[Any, ...] = params) -> list[str]:
                c.execute("SET LOCAL enable_seqscan = off")
                return [str(r[0]) for r in c.execute("EXPLAIN " + q, p).fetchall()]

            plan = db.read(explain)
            assert not [line for line in plan if "Seq Scan" in line], plan
        else:
            plan = db.read(lambda c, q=sql, p=params: c.execute("EXPLAIN QUERY PLAN " + q, p).fetchall())
            details = [str(row[-1]) for row in plan]
            # The outbox's walk is SQLite's rowid order (its INTEGER PRIMARY KEY), bounded by LIMIT.
            # ("SCAN CONSTANT ROW" is a SELECT without a table, around subqueries.)
            scans = [
                d for d in details if d.startswith("SCAN") and "USING" not in d and d != "SCAN CONSTANT ROW"
            ]
            outbox = sql is _notify.SQL_EVENTS or sql is _notify.SQL_NOTIFY_DUE
            assert scans == (["SCAN atfg_wait_events"] if outbox else []), (sql, details)
            # Each in its index's order: none reads every matching row to sort them (a "RIGHT PART"
            # sorts only the rows that tie on the index's order, by id).
            assert not [d for d in details if "TEMP B-TREE FOR ORDER BY" in d], (sql, details)
