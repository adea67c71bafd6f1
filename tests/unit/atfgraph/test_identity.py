"""Tokens, roles and the audit trail on a real SQLite file (or, with
``PYWORKFLOW_TEST_STORE=postgresql``, a new PostgreSQL database)."""

from __future__ import annotations

import asyncio
import os
import stat
import time
from collections.abc import Iterator
from pathlib import Path
from typing import Any

import orjson
import pytest

from atfgraph._credentials import load_token
from atfgraph.server._identity import (
    MAX_AUDIT_DETAIL,
    MAX_AUDIT_TARGET,
    AnonymousAuditLimit,
    Identity,
    IdentityError,
    Permission,
    Principal,
    Role,
    identity_migrations,
)
from pyworkflow.store import GroupCommitWriter, SQLiteDatabase

ON_POSTGRES = os.environ.get("PYWORKFLOW_TEST_STORE", "sqlite") in ("postgresql", "postgres")


@pytest.fixture
def identity(tmp_path: Path, request: pytest.FixtureRequest) -> Iterator[Identity]:
    db: GroupCommitWriter[Any]
    if ON_POSTGRES:
        from pyworkflow.store import PostgresDatabase

        db = PostgresDatabase(
            request.getfixturevalue("pg_database"), migrations=identity_migrations("postgres")
        )
    else:
        db = SQLiteDatabase(tmp_path / "graph.db", migrations=identity_migrations())
    yield Identity(db)
    db.close()


def stored_bytes(identity: Identity, tmp_path: Path) -> bytes:
    """Everything the database holds: the SQLite files, or every token row as PostgreSQL prints it."""
    if not ON_POSTGRES:
        identity.db.close()
        return b"".join(p.read_bytes() for p in tmp_path.glob("graph.db*"))
    rows = identity.db.reader().execute("SELECT t::text FROM atfg_tokens t").fetchall()
    assert rows
    return "\n".join(r[0] for r in rows).encode()


async def test_a_token_verifies_until_revoked_and_only_its_digest_is_stored(
    identity: Identity, tmp_path: Path
) -> None:
    info, raw = await identity.create_token("alice", "reviewer", created_by=None)
    assert raw.startswith(f"atfg_{info.id}_") and len(raw) == 5 + 16 + 1 + 32
    principal = identity.verify(raw)
    assert principal == Principal(info.id, "alice", Role.REVIEWER)
    assert principal.can(Permission.DECIDE) and not principal.can(Permission.SUBMIT)
    # wrong secret with a real id, truncated, garbage, None: all anonymous
    assert identity.verify(raw[:-1] + ("A" if raw[-1] != "A" else "B")) is None
    assert identity.verify(raw[:-3]) is None
    assert identity.verify("Bearer " + raw) is None
    assert identity.verify(None) is None
    assert await identity.revoke(info.id) is True
    assert await identity.revoke(info.id) is False
    assert identity.verify(raw) is None
    dump = stored_bytes(identity, tmp_path)
    secret = raw[len("atfg_") + 16 + 1 :]  # the secret may itself contain "_"
    assert len(secret) == 32
    assert raw.encode() not in dump and secret.encode() not in dump
    assert raw.encode().hex().encode() not in dump  # bytea prints as hex


async def test_bad_token_administration_is_refused(identity: Identity) -> None:
    for name in ("", "   ", "x" * 101, 7):
        with pytest.raises(IdentityError):
            await identity.create_token(name, "reviewer", created_by=None)  # type: ignore[arg-type]
    with pytest.raises(IdentityError, match="role must be one of"):
        await identity.create_token("bob", "superuser", created_by=None)
    admin = Principal("0" * 16, "admin", Role.ADMINISTRATOR)
    with pytest.raises(PermissionError):
        await identity.create_token("root", "owner", created_by=admin)
    for bad in ("nope", "0" * 16, "'; DROP TABLE atfg_tokens; --"):
        with pytest.raises(IdentityError):
            await identity.revoke(bad)
    assert identity.count() == 0


async def test_bootstrap_writes_a_private_credentials_file_once(identity: Identity, tmp_path: Path) -> None:
    home = tmp_path / "home"
    path = await identity.bootstrap(home, "http://127.0.0.1:7878")
    assert path == home / "credentials.json"
    assert stat.S_IMODE(os.stat(path).st_mode) == 0o600
    assert await identity.bootstrap(home, "http://127.0.0.1:7878") is None
    owner = load_token("owner", home)
    worker = load_token("worker", home)
    assert owner and worker and owner != worker
    assert identity.verify(owner) is not None and identity.verify(owner).role is Role.OWNER  # type: ignore[union-attr]
    assert identity.verify(worker).role is Role.WORKER  # type: ignore[union-attr]
    assert {t.role for t in await identity.list_tokens()} == {Role.OWNER, Role.WORKER}


async def test_servers_starting_at_once_on_a_new_database_mint_one_set_of_credentials(
    identity: Identity, tmp_path: Path, request: pytest.FixtureRequest
) -> None:
    """Several servers sharing a new database, started together, all find it empty; one mints
    the owner and worker credentials, the others none (the check is repeated in the minting
    transaction, which they take in turn)."""
    again: list[Identity] = []
    for _ in range(3):
        if ON_POSTGRES:
            from pyworkflow.store import PostgresDatabase

            url = str(request.getfixturevalue("pg_database"))
            db: GroupCommitWriter[Any] = PostgresDatabase(url, migrations=identity_migrations("postgres"))
        else:
            db = SQLiteDatabase(tmp_path / "graph.db", migrations=identity_migrations())
        again.append(Identity(db))
    servers = [identity, *again]
    try:
        for server in servers:
            server.count = lambda: 0  # type: ignore[method-assign]  # each saw it empty
        homes = [tmp_path / f"home{i}" for i in range(len(servers))]
        written = await asyncio.gather(
            *(s.bootstrap(h, "http://x") for s, h in zip(servers, homes, strict=True))
        )
        assert sum(path is not None for path in written) == 1, written
        tokens = await again[0].list_tokens()
        assert sorted(t.role for t in tokens) == [Role.OWNER, Role.WORKER]
    finally:
        for extra in again:
            extra.db.close()


async def test_env_token_wins_over_the_file(
    identity: Identity, tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    await identity.bootstrap(tmp_path, "http://x")
    monkeypatch.setenv("ATFGRAPH_TOKEN", "atfg_from_env")
    assert load_token("owner", tmp_path) == "atfg_from_env"
    monkeypatch.delenv("ATFGRAPH_TOKEN")
    assert load_token("owner", tmp_path / "missing") is None


async def test_audit_records_who_what_and_outcome(identity: Identity) -> None:
    who = Principal("1" * 16, "alice", Role.REVIEWER)
    await identity.audit(
        who, "approval.decide", target="appr1", outcome="allowed", detail={"decision": "approved"}
    )
    await identity.audit(None, "approval.decide", target="appr1", outcome="denied")
    entries = await identity.list_audit(target="appr1")
    assert [(e["principal"], e["outcome"]) for e in entries] == [
        ("anonymous", "denied"),
        ("alice", "allowed"),
    ]
    assert entries[1]["detail"] == {"decision": "approved"}


def raw_audit(identity: Identity) -> list[tuple[Any, ...]]:
    sql = "SELECT principal, action, target, detail FROM atfg_audit ORDER BY id"
    return [tuple(r) for r in identity.db.reader().execute(sql).fetchall()]


async def test_an_audit_row_is_bounded_and_storable_whatever_it_is_given(identity: Identity) -> None:
    """No target or detail can make the audit insert fail (PostgreSQL refuses NUL in text; a lone
    surrogate is not UTF-8) or make a row large: the bounds are documented in operators.md."""
    who = Principal("1" * 16, "alice", Role.WORKER)
    hostile = "\x00" + "é" * 1000 + "\ud800"
    await identity.audit(who, "approval.decide", target=hostile, outcome="denied", detail="forbidden")
    await identity.audit(who, "hook.resume", target="h", outcome="allowed", detail={"payload": "y" * 100_000})
    await identity.audit(who, "hook.resume", target="\udcff", outcome="refused", detail="no \ud800 here")
    rows = raw_audit(identity)
    assert [r[2] for r in rows] == ["\ufffd" + "é" * (MAX_AUDIT_TARGET - 1), "h", "\ufffd"]
    assert all(len(bytes(r[3])) <= MAX_AUDIT_DETAIL for r in rows)
    big = (await identity.list_audit(target="h"))[0]["detail"]
    assert big["truncated"] is True and big["bytes"] > 100_000
    assert big["head"].startswith('{"payload":"yyy') and len(big["head"]) == 1000
    odd = (await identity.list_audit(target="\ufffd"))[0]["detail"]
    assert odd == {"unserializable": "'no \\ud800 here'"}


async def test_anonymous_denials_are_recorded_within_bounds_and_counted(identity: Identity) -> None:
    identity.anonymous = AnonymousAuditLimit(interval=0.5, rows=3)
    deny = identity.audit
    for _ in range(100):
        await deny(
            None, "approval.decide", target="/a", outcome="denied", detail="no valid token", client="10.0.0.1"
        )
    await deny(
        None, "token.revoke", target="/t", outcome="denied", detail="no valid token", client="10.0.0.1"
    )
    await deny(
        None, "approval.decide", target="/a", outcome="denied", detail="no valid token", client="10.0.0.2"
    )
    await deny(
        None, "approval.decide", target="/a", outcome="denied", detail="no valid token", client="10.0.0.3"
    )
    who = Principal("2" * 16, "wendy", Role.WORKER)
    for _ in range(20):  # a token's denials are always recorded: it is accountable
        await deny(who, "approval.decide", target="/a", outcome="denied", detail="forbidden")
    rows = raw_audit(identity)
    anonymous = [(r[1], orjson.loads(r[3])) for r in rows if r[0] == "anonymous"]
    assert anonymous == [
        ("approval.decide", "no valid token"),
        ("token.revoke", "no valid token (99 earlier anonymous attempts not recorded)"),
        ("approval.decide", "no valid token"),  # 10.0.0.3 is over the 3 rows of this interval
    ]
    assert sum(r[0] == "wendy" for r in rows) == 20
    time.sleep(0.55)
    await deny(
        None, "approval.decide", target="/a", outcome="denied", detail="no valid token", client="10.0.0.1"
    )
    last = raw_audit(identity)[-1]
    assert (last[0], orjson.loads(last[3])) == (
        "anonymous",
        "no valid token (1 earlier anonymous attempt not recorded)",
    )


async def test_the_verification_cache_checks_every_secret_and_honours_revocations(identity: Identity) -> None:
    """A server on PostgreSQL reuses a token's row for a moment; a revocation on this server is
    immediate, one on another server sharing the database counts within ``cache_seconds``."""
    here = Identity(identity.db, cache_seconds=0.3)
    elsewhere = Identity(identity.db)
    info, raw = await here.create_token("carol", "reviewer", created_by=None)
    assert here.verify(raw) == Principal(info.id, "carol", Role.REVIEWER)
    assert here.verify(raw[:-1] + ("A" if raw[-1] != "A" else "B")) is None  # cached id, wrong secret
    assert await elsewhere.revoke(info.id) is True
    deadline = time.monotonic() + 2
    while here.verify(raw) is not None:
        assert time.monotonic() < deadline, "a revocation elsewhere was never seen"
        time.sleep(0.05)
    other, raw2 = await here.create_token("dave", "worker", created_by=None)
    assert here.verify(raw2) is not None
    assert await here.revoke(other.id) is True
    assert here.verify(raw2) is None  # at once: this server revoked it
