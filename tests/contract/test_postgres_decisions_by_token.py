"""PostgreSQL only: a decision by token is one statement (migration 0021, ``pyworkflow_resolve_token``)
where nothing needs checking in Python first: the wait's lookup, the decision and the claim of the
run it wakes. A wait with a payload schema, or whose run another transaction holds, is decided by
id after that statement answered (nothing written by it); every refusal is the same as before."""

from __future__ import annotations

import asyncio
import secrets
from typing import Any

import psycopg
import pytest

from counted import sent_statements
from pyworkflow import (
    HookAlreadyReceivedError,
    HookExpiredError,
    HookNotFoundError,
    PayloadValidationError,
)
from pyworkflow.store import NewWait, PostgresStore, WaitKind, WaitStatus
from pyworkflow.store._jobs import LOCKS_LAST

pytestmark = pytest.mark.postgres
T0 = 1_700_000_000.0
SCHEMA = b'{"type": "object", "required": ["ok"]}'


async def _parked(
    store: PostgresStore,
    *,
    kind: WaitKind = WaitKind.HOOK,
    schema: bytes | None = None,
    expires_at: float | None = None,
) -> tuple[str, bytes]:
    run_id, digest = secrets.token_hex(6), secrets.token_bytes(32)
    claim = await store.create_run(run_id, "wf", b"{}", now=T0, lease_owner="old", lease_ttl=30)
    assert claim is not None
    wait = NewWait(secrets.token_hex(6), "k#1", kind, "k", "", digest, expires_at, schema)
    await store.create_wait(claim.fence, wait, now=T0)
    await store.suspend_run(claim.fence, notified=[wait.id], delivered={}, now=T0)
    return run_id, digest


def _check(data: bytes) -> Any:
    def check(wait: Any) -> None:
        if wait.payload_schema is not None and b'"ok"' not in data:
            raise PayloadValidationError("the payload has no 'ok'")

    return check


async def _claiming(store: PostgresStore, digest: bytes, data: bytes, now: float = T0 + 1) -> Any:
    return await store.resolve_wait_and_claim(
        token_digest=digest,
        payload=data,
        now=now,
        check=_check(data),
        owner="me",
        lease_ttl=30,
        max_crashes=3,
    )


async def test_a_plain_hook_is_looked_up_decided_and_claimed_in_one_statement(
    pg_store: PostgresStore, monkeypatch: pytest.MonkeyPatch
) -> None:
    run_id, digest = await _parked(pg_store)
    other, other_digest = await _parked(pg_store)
    _, late = await _parked(pg_store, expires_at=T0 + 5)
    sent = sent_statements(monkeypatch, pg_store)
    wait, claim = await _claiming(pg_store, digest, b'{"ok": true}')
    assert sent == ["pyworkflow_resolve_token"]
    assert (wait.run_id, wait.status, wait.payload) == (run_id, WaitStatus.RECEIVED, b'{"ok": true}')
    assert claim is not None and claim.fence.run_id == run_id and claim.state is not None
    assert [w.status for w in claim.state.waits.values()] == [WaitStatus.RECEIVED]

    # Without a claim (a process with no runtime here, a Celery deployment): one statement too.
    decided = await pg_store.resolve_wait(token_digest=other_digest, payload=b"1", now=T0 + 1)
    assert sent == ["pyworkflow_resolve_token"] * 2
    assert (decided.run_id, decided.status) == (other, WaitStatus.RECEIVED)

    # Refusals: the same errors as with the read first, in one statement each, nothing written.
    with pytest.raises(HookAlreadyReceivedError):
        await _claiming(pg_store, digest, b"2")
    with pytest.raises(HookNotFoundError, match="no hook has this token"):
        await _claiming(pg_store, secrets.token_bytes(32), b"2")
    with pytest.raises(HookExpiredError):
        await _claiming(pg_store, late, b"2", now=T0 + 10)
    assert sent == ["pyworkflow_resolve_token"] * 5
    stored = [await pg_store.get_wait_by_token(d) for d in (digest, other_digest, late)]
    assert [(w.status, w.payload) for w in stored if w is not None] == [
        (WaitStatus.RECEIVED, b'{"ok": true}'),
        (WaitStatus.RECEIVED, b"1"),
        (WaitStatus.EXPIRED, None),
    ]


async def test_a_hook_with_a_schema_is_checked_before_anything_is_written(
    pg_store: PostgresStore, monkeypatch: pytest.MonkeyPatch
) -> None:
    run_id, digest = await _parked(pg_store, schema=SCHEMA)
    sent = sent_statements(monkeypatch, pg_store)
    with pytest.raises(PayloadValidationError):
        await _claiming(pg_store, digest, b"{}")
    assert sent == ["pyworkflow_resolve_token"]  # it answered the terms; the check refused
    pending = await pg_store.get_wait_by_token(digest)
    assert pending is not None and pending.status == WaitStatus.PENDING and pending.payload is None

    sent.clear()
    wait, claim = await _claiming(pg_store, digest, b'{"ok": 1}')
    assert sent == ["pyworkflow_resolve_token", "pyworkflow_resolve_wait_and_claim"]
    assert wait.status == WaitStatus.RECEIVED and claim is not None and claim.fence.run_id == run_id


async def test_an_approval_token_is_refused(pg_store: PostgresStore) -> None:
    _, digest = await _parked(pg_store, kind=WaitKind.APPROVAL)
    with pytest.raises(HookNotFoundError, match="is an approval"):
        await _claiming(pg_store, digest, b"1")
    pending = await pg_store.get_wait_by_token(digest)
    assert pending is not None and pending.status == WaitStatus.PENDING


async def test_a_run_locked_elsewhere_is_decided_by_id_once_its_lock_is_free(
    pg_store: PostgresStore, pg_database: str, monkeypatch: pytest.MonkeyPatch
) -> None:
    run_id, digest = await _parked(pg_store)
    sent = sent_statements(monkeypatch, pg_store)
    with psycopg.connect(pg_database) as other:  # a transaction of another process holds the run
        other.execute("SELECT 1 FROM runs WHERE id = %s FOR UPDATE", (run_id,))
        deciding = asyncio.ensure_future(_claiming(pg_store, digest, b"1"))
        for _ in range(200):
            if len(sent) == 2:
                break
            await asyncio.sleep(0.01)
        assert sent == ["pyworkflow_resolve_token", "pyworkflow_resolve_wait_and_claim"]
        await asyncio.sleep(0.1)
        assert not deciding.done()  # the decision by id waits for the lock, in the usual order
        other.commit()
    wait, claim = await deciding
    assert wait.status == WaitStatus.RECEIVED and claim is not None and claim.fence.run_id == run_id


async def test_decisions_by_token_grouped_with_other_transitions_all_commit(pg_store: PostgresStore) -> None:
    """Many at once share groups with the turns' statements (sorted by run, these last): none waits
    on another in a cycle, and each run is decided and claimed once."""
    parked = [await _parked(pg_store) for _ in range(40)]
    fresh = [secrets.token_hex(6) for _ in range(40)]
    results = await asyncio.gather(
        *(_claiming(pg_store, digest, b"1") for _, digest in parked),
        *(pg_store.create_run(r, "wf", b"{}", now=T0, lease_owner="x", lease_ttl=30) for r in fresh),
    )
    decided = results[: len(parked)]
    assert sorted(c.fence.run_id for _, c in decided) == sorted(r for r, _ in parked)
    assert all(claim is not None for claim in results[len(parked) :])


def test_statements_that_find_their_run_sort_after_every_run() -> None:
    ids = ["", "0", "run-1", "zzz", "\uffff", "\U0001f600 run", secrets.token_hex(8)]
    assert sorted([*ids, LOCKS_LAST])[-1] == LOCKS_LAST
