"""A decision by token in one statement on PostgreSQL (pyworkflow migration 0021,
``pyworkflow_resolve_token``): hooks created on a database written before it are decided after
it, a plain one by that one statement, one with a payload schema checked first and then decided
by id. (SQLite has no such migration: its decision reads the wait in its own transaction, which
costs no round trip.)"""

from __future__ import annotations

import secrets
from typing import Any

import pytest
from upgrades import pyworkflow_postgres_before

from counted import sent_statements
from pyworkflow import PayloadValidationError
from pyworkflow.store import NewWait, WaitKind, WaitStatus
from pyworkflow.store._postgres import PostgresStore

pytestmark = pytest.mark.postgres

NEW = 21
T0 = 1_700_000_000.0
HAS_FUNCTION = "SELECT count(*) FROM pg_proc WHERE proname = 'pyworkflow_resolve_token'"


async def _parked(store: PostgresStore, schema: bytes | None) -> tuple[str, bytes]:
    run_id, digest = secrets.token_hex(6), secrets.token_bytes(32)
    claim = await store.create_run(run_id, "wf", b"{}", now=T0, lease_owner="old", lease_ttl=30)
    assert claim is not None
    wait = NewWait(
        secrets.token_hex(6), "s#1/step_hook:ok#1", WaitKind.STEP_HOOK, "ok", "s#1", digest, None, schema
    )
    await store.create_wait(claim.fence, wait, now=T0)
    await store.suspend_run(claim.fence, notified=[wait.id], delivered={}, now=T0)
    return run_id, digest


def _refuse_without_ok(data: bytes) -> Any:
    def check(wait: Any) -> None:
        if wait.payload_schema is not None and b'"ok"' not in data:
            raise PayloadValidationError("the payload has no 'ok'")

    return check


async def test_hooks_created_before_the_migration_are_decided_by_token_after_it(
    pg_database: str, monkeypatch: pytest.MonkeyPatch
) -> None:
    old = pyworkflow_postgres_before(pg_database, NEW)
    try:
        assert old.database.read(lambda c: c.execute(HAS_FUNCTION).fetchone()) == (0,)
        plain, checked = await _parked(old, None), await _parked(old, b'{"required": ["ok"]}')
    finally:
        old.close()

    store = PostgresStore(pg_database)  # applies migration 21
    try:
        assert store.database.read(lambda c: c.execute(HAS_FUNCTION).fetchone()) == (1,)
        sent = sent_statements(monkeypatch, store)

        async def decide(digest: bytes, data: bytes) -> Any:
            return await store.resolve_wait_and_claim(
                token_digest=digest,
                payload=data,
                now=T0 + 1,
                check=_refuse_without_ok(data),
                owner="new",
                lease_ttl=30,
                max_crashes=3,
            )

        wait, claim = await decide(plain[1], b"1")
        assert sent == ["pyworkflow_resolve_token"]
        assert wait.status == WaitStatus.RECEIVED and claim is not None and claim.fence.run_id == plain[0]

        sent.clear()
        with pytest.raises(PayloadValidationError):
            await decide(checked[1], b"{}")
        wait, claim = await decide(checked[1], b'{"ok": 1}')
        assert sent == ["pyworkflow_resolve_token"] * 2 + ["pyworkflow_resolve_wait_and_claim"]
        assert wait.status == WaitStatus.RECEIVED and claim is not None and claim.fence.run_id == checked[0]
    finally:
        store.close()
