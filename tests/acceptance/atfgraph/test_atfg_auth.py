"""Identity and access against a real server: every route x every role, decisions audited, tokens
revocable, and no raw token anywhere in the database."""

from __future__ import annotations

import asyncio
from collections.abc import Callable
from typing import Any

import httpx
import pytest
from atfg_harness import ServerProcess, WorkerProcess, database_dump

from atfgraph import Client, ForbiddenError
from atfgraph.server._auth import RULES
from atfgraph.server._identity import ROLE_PERMISSIONS, Permission, Role

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
                granted = ROLE_PERMISSIONS[Role(role)] if role != "anonymous" else frozenset()
                if role == "anonymous":
                    expected: set[int] | None = {401}
                elif not granted & rule.allowed:
                    expected = {403}
                elif not granted & (rule.allowed - rule.leased):
                    expected = {403}  # only under a task lease, and this request names none
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


#: Every route of the worker protocol that names a run: a worker token acts there only under the
#: task lease it holds on that run.
LEASED_ACTIONS = {
    "traverser.submit",
    "task.complete",
    "task.fail",
    "task.release",
    "checkpoint.get",
    "checkpoint.put",
    "approval.request",
    "memory.get",
    "memory.put",
}


async def test_a_worker_acts_only_under_a_lease_it_holds(server: ServerProcess) -> None:
    assert {r.action for r in RULES if r.leased} == LEASED_ACTIONS
    assert "traverser.get" not in {r.action for r in RULES if Permission.WORK in r.allowed}
    owner, worker = server.headers("owner"), server.headers("worker")
    async with httpx.AsyncClient(base_url=server.url, timeout=30) as http:

        async def call(headers: dict[str, str], method: str, path: str, **kw: Any) -> httpx.Response:
            return await http.request(method, "/api/v2" + path, headers=headers, **kw)

        # Two workers of node "scope", each holding the lease of one traverser (both epoch 1).
        ids = []
        for _ in range(2):
            r = await call(
                worker, "POST", "/workers", json={"node_id": "scope", "version": "1", "capacity": 1}
            )
            ids.append(r.json()["id"])
        w1, w2 = ids
        a = (await call(owner, "POST", "/traversers", json={"target": "scope.run"})).json()["id"]
        b = (await call(owner, "POST", "/traversers", json={"target": "scope.run"})).json()["id"]
        held = {}
        for wid in (w1, w2):
            task = (await call(worker, "POST", f"/workers/{wid}/claim", json={"max": 1})).json()["tasks"][0]
            held[wid] = (task["traverser"]["id"], task["epoch"])
        assert {held[w1][0], held[w2][0]} == {a, b}
        a, ea = held[w1]
        b, eb = held[w2]
        assert ea == eb == 1  # epochs alone are guessable: the lease names its worker too
        mine = {"epoch": ea, "worker_id": w1}
        theirs = {"epoch": eb, "worker_id": w1}  # B's epoch, claimed as W1's
        child = {"target": "scope.child", "input": {"n": 1}, "parent_id": a, **mine}

        # Under the lease it holds, everything the protocol needs is allowed.
        r = await call(worker, "PUT", f"/traversers/{a}/checkpoints/c", json={"value": 1, **mine})
        assert r.status_code == 200, r.text
        r = await call(worker, "GET", f"/traversers/{a}/checkpoints/c", params=mine)
        assert r.status_code == 200 and r.json()["value"] == 1
        r = await call(worker, "PUT", "/memory/s/k", json={"value": "w1", "traverser_id": a, **mine})
        assert r.status_code == 200, r.text
        r = await call(worker, "GET", "/memory/s/k", params={"traverser_id": a, **mine})
        assert r.status_code == 200 and r.json()["value"] == "w1"
        approval = {"operation_key": "op", "prompt": "ok?", "pause": False}
        r = await call(worker, "POST", "/approvals", json={"traverser_id": a, **approval, **mine})
        assert r.status_code == 200 and r.json()["paused"] is False
        r = await call(worker, "POST", "/traversers", json={**child, "idempotency_key": f"child:{a}:1:c"})
        assert r.status_code == 201, r.text
        child_id = r.json()["id"]
        # Following its own child is submitting it again (same key): the same child, 200.
        again = {**child, "idempotency_key": f"child:{a}:1:c", "wait_for": "terminal", "wait_seconds": 0.1}
        r = await call(worker, "POST", "/traversers", json=again)
        assert r.status_code == 200 and r.json()["id"] == child_id

        # Without a lease: 403, whatever the body holds (the 201, own prompt, memory, reads).
        refused = [
            await call(worker, "POST", "/traversers", json={"target": "scope.run"}),
            await call(
                worker, "POST", "/traversers", json={"target": "scope.run", "parent_id": a, "epoch": ea}
            ),
            await call(worker, "POST", "/approvals", json={"traverser_id": b, **approval}),
            await call(worker, "PUT", "/memory/s/k", json={"value": "x"}),
            await call(worker, "GET", "/memory/s/k"),
            await call(worker, "GET", f"/traversers/{b}"),
            await call(worker, "GET", f"/traversers/{b}/checkpoints/c"),
            await call(worker, "PUT", f"/traversers/{b}/checkpoints/c", json={"value": 2, "epoch": eb}),
            await call(worker, "POST", f"/traversers/{b}/complete", json={"epoch": eb, "result": 1}),
        ]
        # Naming a live lease another worker holds: 403 too.
        refused += [
            await call(worker, "PUT", f"/traversers/{b}/checkpoints/c", json={"value": 2, **theirs}),
            await call(worker, "GET", f"/traversers/{b}/checkpoints/c", params=theirs),
            await call(worker, "POST", "/approvals", json={"traverser_id": b, **approval, **theirs}),
            await call(worker, "POST", f"/traversers/{b}/complete", json={"result": 1, **theirs}),
            await call(worker, "POST", f"/traversers/{b}/fail", json={"error": {"code": "x"}, **theirs}),
            await call(worker, "POST", f"/traversers/{b}/release", json=theirs),
            await call(worker, "PUT", "/memory/s/k", json={"value": "x", "traverser_id": b, **theirs}),
            await call(worker, "POST", "/traversers", json={**child, "parent_id": b, **theirs}),
        ]
        for r in refused:
            assert r.status_code == 403 and r.json()["error"]["code"] == "forbidden", r.text
        # A lease that is not live (a stale or made-up epoch): the protocol's 409 lease_lost.
        for stale in ({"epoch": ea + 1, "worker_id": w1}, {"epoch": 99, "worker_id": w1}):
            r = await call(worker, "PUT", f"/traversers/{a}/checkpoints/c", json={"value": 3, **stale})
            assert r.status_code == 409 and r.json()["error"]["code"] == "lease_lost", r.text
            r = await call(
                worker, "POST", "/traversers", json={**child, "idempotency_key": f"child:{a}:2:c", **stale}
            )
            assert r.status_code == 409 and r.json()["error"]["code"] == "lease_lost", r.text
        # Its own lease, but another traverser's child key: it cannot reach B's children (nor any
        # traverser submitted with some other key) by submitting again.
        for key in (f"child:{b}:1:c", "someone-elses-key", None):
            r = await call(worker, "POST", "/traversers", json={**child, "idempotency_key": key})
            assert r.status_code == 422 and r.json()["error"]["code"] == "validation_error", r.text

        # Nothing the refusals named changed.
        assert (await call(owner, "GET", f"/traversers/{b}/checkpoints/c")).status_code == 404
        assert (
            await call(owner, "GET", "/approvals", params={"traverser_id": b, "status": "all"})
        ).json() == {"items": [], "next_cursor": None}
        assert (await call(owner, "GET", "/memory/s/k")).json()["value"] == "w1"
        assert (await call(owner, "GET", f"/traversers/{b}")).json()["status"] == "running"
        queued = (await call(owner, "GET", "/traversers", params={"status": "queued"})).json()["items"]
        assert [t["id"] for t in queued] == [child_id]
        assert (await call(owner, "GET", f"/traversers/{a}/checkpoints/c")).json()["revision"] == 1

        # The denials are in the audit trail, with the worker's name and why.
        audit = (await call(owner, "GET", "/audit", params={"limit": 200})).json()["items"]
        denied = {
            (e["action"], e["detail"])
            for e in audit
            if e["principal"] == "worker" and e["outcome"] == "denied"
        }
        assert ("traverser.submit", "no task lease") in denied
        assert ("memory.put", "no task lease") in denied
        assert ("checkpoint.put", "lease held by another worker") in denied
        assert ("approval.request", "lease held by another worker") in denied

        # Owners keep what they had: no lease needed for a submission, memory, an approval.
        assert (await call(owner, "POST", "/traversers", json={"target": "scope.run"})).status_code == 201
        assert (await call(owner, "PUT", "/memory/s/k", json={"value": "owner"})).status_code == 200
        r = await call(owner, "POST", "/approvals", json={"traverser_id": b, **approval})
        assert r.status_code == 200 and r.json()["approval"]["traverser_id"] == b


async def test_a_worker_token_acts_only_as_the_workers_it_registered(server: ServerProcess) -> None:
    """Worker ids are no capability: a second worker credential cannot claim, heartbeat, release
    or write as a worker the first one registered (403, audited, nothing changes); owners can."""
    owner = server.headers("owner")
    async with httpx.AsyncClient(base_url=server.url, timeout=30) as http:

        async def call(headers: dict[str, str], method: str, path: str, **kw: Any) -> httpx.Response:
            return await http.request(method, "/api/v2" + path, headers=headers, **kw)

        created = await call(owner, "POST", "/tokens", json={"name": "second fleet", "role": "worker"})
        assert created.status_code == 201, created.text
        first, second = server.headers("worker"), {"authorization": f"Bearer {created.json()['token']}"}
        register = {"node_id": "bound", "version": "1", "capacity": 1}
        w1 = (await call(first, "POST", "/workers", json=register)).json()["id"]
        w2 = (await call(second, "POST", "/workers", json=register)).json()["id"]
        a = (await call(owner, "POST", "/traversers", json={"target": "bound.run"})).json()["id"]
        await call(owner, "POST", "/traversers", json={"target": "bound.run"})
        task = (await call(first, "POST", f"/workers/{w1}/claim", json={"max": 1})).json()["tasks"][0]
        assert task["traverser"]["id"] == a
        lease = {"epoch": task["epoch"], "worker_id": w1}
        before = state_of_runs(server)

        refused = [
            await call(second, "POST", f"/workers/{w1}/claim", json={"max": 1}),
            await call(second, "POST", f"/workers/{w1}/heartbeat", json={"leases": [{"id": a, "epoch": 1}]}),
            await call(second, "POST", f"/workers/{w1}/release"),
            await call(second, "PUT", f"/traversers/{a}/checkpoints/c", json={"value": 1, **lease}),
            await call(second, "POST", f"/traversers/{a}/complete", json={"result": 1, **lease}),
        ]
        assert [r.status_code for r in refused] == [403] * 5, [r.text for r in refused]
        assert all(r.json()["error"]["code"] == "forbidden" for r in refused)
        assert state_of_runs(server) == before
        # Its own worker is fine; but its report may not ask for the next tasks of the other
        # credential's worker (refused before the report changes anything).
        r = await call(second, "POST", f"/workers/{w2}/heartbeat", json={})
        assert r.status_code == 200, r.text
        mine = (await call(second, "POST", f"/workers/{w2}/claim", json={"max": 1})).json()["tasks"][0]
        b, own = mine["traverser"]["id"], {"epoch": mine["epoch"], "worker_id": w2}
        r = await call(
            second,
            "POST",
            f"/traversers/{b}/complete",
            json={"result": 2, **own, "claim": {"worker_id": w1, "max": 1}},
        )
        assert r.status_code == 403 and r.json()["error"]["code"] == "forbidden", r.text
        assert (await call(owner, "GET", f"/traversers/{b}")).json()["status"] == "running"
        r = await call(second, "POST", f"/traversers/{b}/complete", json={"result": 2, **own})
        assert r.status_code == 200 and r.json()["status"] == "succeeded", r.text

        # The credential that registered it, and an owner, may act as it.
        r = await call(first, "POST", f"/workers/{w1}/heartbeat", json={"leases": [{"id": a, "epoch": 1}]})
        assert r.status_code == 200 and r.json()["lost"] == [], r.text
        r = await call(owner, "POST", f"/workers/{w1}/heartbeat", json={})
        assert r.status_code == 200, r.text
        r = await call(first, "POST", f"/traversers/{a}/complete", json={"result": 1, **lease})
        assert r.status_code == 200, r.text
        audit = (await call(owner, "GET", "/audit", params={"target": w1})).json()["items"]
        denied = [e for e in audit if e["action"] == "worker.act" and e["outcome"] == "denied"]
        assert {e["target"] for e in denied} == {w1} and len(denied) >= 5


def state_of_runs(server: ServerProcess) -> list[str]:
    """The database's rows but the audit trail's and the tokens' (a denied call is audited, and
    touches its token's last use): what a refused call must leave unchanged."""
    kept, table = [], ""
    for line in database_dump(server).splitlines():
        if line.startswith("-- "):
            table = line[3:]
        if not any(
            name in (line if not server.on_postgres else table) for name in ("atfg_audit", "atfg_tokens")
        ):
            kept.append(line)
    return kept
