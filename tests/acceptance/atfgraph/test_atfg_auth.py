"""Identity and access against a real server: every route x every role, decisions audited, tokens
revocable, and no raw token anywhere in the database."""

from __future__ import annotations

import asyncio
from collections.abc import Callable

import httpx
import pytest
from atfg_harness import ServerProcess, WorkerProcess, database_dump

from atfgraph import Client, ForbiddenError
from atfgraph.server._auth import RULES
from atfgraph.server._identity import ROLE_PERMISSIONS, Role

ROLES = ("anonymous", "worker", "reviewer", "administrator", "owner")


async def make_tokens(server: ServerProcess) -> dict[str, str]:
    tokens = {"owner": server.token("owner"), "worker": server.token("worker")}
    async with httpx.AsyncClient(base_url=server.url, headers=server.headers(), timeout=30) as http:
        for role in ("reviewer", "administrator"):
            r = await http.post("/api/v2/tokens", json={"name": f"a {role}", "role": role})
            assert r.status_code == 201, r.text
            tokens[role] = r.json()["token"]
    return tokens


def concrete(pattern: str) -> str:
    return pattern.replace("([^/]+)", "no-such-id")


async def test_every_route_by_every_role(server: ServerProcess) -> None:
    tokens = await make_tokens(server)
    async with httpx.AsyncClient(base_url=server.url, timeout=30) as http:
        for rule in RULES:
            path = concrete(rule.pattern.pattern)
            for role in ROLES:
                headers = {} if role == "anonymous" else {"Authorization": f"Bearer {tokens[role]}"}
                body = None if rule.method == "GET" else {}
                r = await http.request(rule.method, path, json=body, headers=headers)
                if role == "anonymous":
                    expected: set[int] | None = {401}
                elif not any(p in ROLE_PERMISSIONS[Role(role)] for p in rule.allowed):
                    expected = {403}
                else:
                    expected = None
                where = f"{rule.method} {path} as {role}: {r.status_code} {r.text[:200]}"
                if expected is not None:
                    assert r.status_code in expected, where
                    assert r.json()["error"]["code"] == (
                        "unauthenticated" if role == "anonymous" else "forbidden"
                    )
                else:
                    assert r.status_code not in (401, 403) and r.status_code < 500, where
        # Unknown API paths reveal nothing without a token; the API description is public.
        assert (await http.get("/api/v2/nothing-here")).status_code == 401
        assert (await http.get("/api/v2/openapi.json")).status_code == 200
        bad = {"Authorization": "Bearer atfg_0000000000000000_" + "A" * 32}
        assert (await http.get("/api/v2/approvals", headers=bad)).status_code == 401
        assert (
            await http.get("/api/v2/approvals", headers={"Authorization": "Basic eDp5"})
        ).status_code == 401


async def test_a_worker_cannot_decide_and_denials_are_audited(
    server: ServerProcess, spawn_worker: Callable[..., WorkerProcess], client: Client
) -> None:
    tokens = await make_tokens(server)
    spawn_worker("examples.python.features.approvals.restart_agent:app")
    handle = await client.submit("approval.reviewed", {})
    for _ in range(200):
        pending = [a for a in await client.list_approvals() if a["traverser_id"] == handle.id]
        if pending:
            break
        await asyncio.sleep(0.05)
    approval = pending[0]
    async with Client(server.url, token=tokens["worker"]) as as_worker:
        with pytest.raises(ForbiddenError) as denied:
            await as_worker.decide_approval(approval["id"], "approved")
        assert denied.value.status == 403
    assert (await client.get_approval(approval["id"]))["status"] == "pending"

    async with Client(server.url, token=tokens["reviewer"]) as as_reviewer:
        decided = await as_reviewer.decide_approval(approval["id"], "approved", {"note": "ok"})
    assert decided["decided_by"] == "a reviewer"
    assert (await handle.result(timeout=30))["decision"] == "approved"

    async with httpx.AsyncClient(base_url=server.url, headers=server.headers(), timeout=30) as http:
        audit = (await http.get("/api/v2/audit", params={"limit": 100})).json()["items"]
    decides = [(e["principal"], e["outcome"]) for e in audit if e["action"] == "approval.decide"]
    assert ("worker", "denied") in decides
    denied = next(e for e in audit if e["action"] == "approval.decide" and e["outcome"] == "denied")
    assert denied["target"] == approval["id"]  # the approval, so its history shows the refusal
    assert ("a reviewer", "allowed") in decides
    allowed = next(e for e in audit if e["action"] == "approval.decide" and e["outcome"] == "allowed")
    assert allowed["target"] == approval["id"] and allowed["detail"]["decision"] == "approved"
    assert allowed["detail"]["response"] == {"note": "ok"}


async def test_tokens_can_be_created_listed_and_revoked(server: ServerProcess) -> None:
    tokens = await make_tokens(server)
    async with httpx.AsyncClient(base_url=server.url, timeout=30) as http:
        admin = {"Authorization": f"Bearer {tokens['administrator']}"}
        r = await http.post("/api/v2/tokens", json={"name": "root", "role": "owner"}, headers=admin)
        assert r.status_code == 403  # only an owner mints owners
        for bad in ({"name": "x", "role": "god"}, {"name": "", "role": "reviewer"}, {"role": "reviewer"}):
            r = await http.post("/api/v2/tokens", json=bad, headers=admin)
            assert r.status_code in (400, 422), r.text
        r = await http.post("/api/v2/tokens", json={"name": "temp", "role": "reviewer"}, headers=admin)
        temp, info = r.json()["token"], r.json()["info"]
        assert (
            await http.get("/api/v2/approvals", headers={"Authorization": f"Bearer {temp}"})
        ).status_code == 200
        listed = (await http.get("/api/v2/tokens", headers=admin)).json()["items"]
        assert {t["name"] for t in listed} >= {
            "owner",
            "worker",
            "a reviewer",
            "an administrator",
            "temp",
        } - {"an administrator"}
        assert all("token" not in t and "digest" not in t for t in listed)
        r = await http.post(f"/api/v2/tokens/{info['id']}/revoke", headers=admin)
        assert r.json()["revoked"] is True and r.json()["info"]["revoked_at"] is not None
        assert (
            await http.get("/api/v2/approvals", headers={"Authorization": f"Bearer {temp}"})
        ).status_code == 401
        assert (await http.post("/api/v2/tokens/ffffffffffffffff/revoke", headers=admin)).status_code == 404


async def test_the_database_holds_no_raw_token(server: ServerProcess) -> None:
    tokens = await make_tokens(server)
    server.stop()
    dump = database_dump(server)
    # The database's files too (SQLite: the file, its WAL and shared memory; PostgreSQL's files
    # belong to its server, so the row dump, in which bytea prints as hex, is checked below).
    files = [] if server.on_postgres else server.db_path.parent.glob(server.db_path.name + "*")
    raw_bytes = b"".join(p.read_bytes() for p in files)
    for token in tokens.values():
        secret = token[len("atfg_") + 16 + 1 :]  # atfg_<16-hex id>_<secret>; the secret may hold "_"
        assert len(secret) == 32
        assert token not in dump and secret not in dump
        assert token.encode().hex() not in dump and secret.encode().hex() not in dump  # bytea as hex
        assert token.encode() not in raw_bytes and secret.encode() not in raw_bytes
    assert "atfg_tokens" in dump  # the dump did include the credentials table
