"""Hostile ids in the path against a real server, on SQLite and (``PYWORKFLOW_TEST_STORE=postgresql``)
PostgreSQL: every route of ``_auth.RULES`` that takes an id answers 4xx in the one error shape for
a double-encoded NUL, a NUL, the bytes of a lone surrogate and 30,000 characters, whoever calls;
the id is decoded once (as the server gives it) and a denial is audited under that id; nothing
but bounded audit rows is written; and anonymous callers cannot grow the audit trail without
bound."""

from __future__ import annotations

import random
import sqlite3
from collections.abc import AsyncIterator, Iterator
from pathlib import Path
from typing import Any

import httpx
import pytest
from atfg_harness import ServerProcess

from atfgraph.server._auth import RULES

#: The documented bounds of one audit row (docs/operators.md, "Audit"): its target in characters
#: and its detail in bytes.
MAX_AUDIT_TARGET = 256
MAX_AUDIT_DETAIL = 16 * 1024

#: Path segments as sent on the wire (already percent-encoded): a NUL encoded twice (one decode
#: makes it the text "%00"), a NUL, the UTF-8 bytes of a lone surrogate (U+D800), the same
#: encoded twice, a byte Python's surrogateescape would turn into one, and 30,000 characters.
HOSTILE = {
    "double-encoded NUL": "%2500",
    "NUL": "%00",
    "surrogate bytes": "%ED%A0%80",
    "double-encoded surrogate": "%25ED%25A0%2580",
    "surrogateescape byte": "%80",
    "30,000 characters": "x" * 30_000,
}
ROLES = ("anonymous", "worker", "reviewer", "owner")
ID_RULES = [rule for rule in RULES if rule.pattern.groups]
ANONYMOUS_ACTIONS = ("approval.decide", "hook.resume", "token.revoke")


@pytest.fixture(scope="module")
def server(tmp_path_factory: pytest.TempPathFactory) -> Iterator[ServerProcess]:
    proc = ServerProcess(tmp_path_factory.mktemp("hostile-ids"))
    proc.start()
    yield proc
    proc.close()


@pytest.fixture(scope="module")
def tokens(server: ServerProcess) -> dict[str, str]:
    made = httpx.post(
        f"{server.url}/api/v2/tokens",
        json={"name": "rita", "role": "reviewer"},
        headers=server.headers(),
        timeout=30,
    )
    assert made.status_code == 201, made.text
    return {
        "owner": server.token("owner"),
        "worker": server.token("worker"),
        "reviewer": made.json()["token"],
    }


@pytest.fixture
async def http(server: ServerProcess) -> AsyncIterator[httpx.AsyncClient]:
    async with httpx.AsyncClient(base_url=server.url, timeout=30) as c:
        yield c


def _connect(server: ServerProcess) -> Any:
    if server.on_postgres:
        import psycopg

        return psycopg.connect(server.db, autocommit=True)
    return sqlite3.connect(server.db_path)


def tables(server: ServerProcess) -> dict[str, list[tuple[Any, ...]]]:
    """Every row of every table but the audit trail (and the tokens' last-use times, which a
    request may update), to show that a request changed nothing else."""
    conn = _connect(server)
    try:
        if server.on_postgres:
            sql = "SELECT table_name FROM information_schema.tables WHERE table_schema = 'public'"
        else:
            sql = "SELECT name FROM sqlite_master WHERE type = 'table'"
        names = sorted(r[0] for r in conn.execute(sql).fetchall())
        rows = {}
        for name in names:
            if name in ("atfg_audit", "sqlite_sequence"):  # the trail and its id counter
                continue
            columns = "id, name, role, revoked_at" if name == "atfg_tokens" else "*"
            rows[name] = sorted(tuple(map(repr, r)) for r in conn.execute(f'SELECT {columns} FROM "{name}"'))
        return rows
    finally:
        conn.close()


def audit_rows(server: ServerProcess, after: int = 0) -> list[dict[str, Any]]:
    conn = _connect(server)
    try:
        cursor = conn.execute(
            "SELECT id, principal, role, action, target, outcome, detail FROM atfg_audit WHERE id > "
            + str(int(after))
            + " ORDER BY id"
        )
        names = ("id", "principal", "role", "action", "target", "outcome", "detail")
        return [dict(zip(names, r, strict=True)) for r in cursor.fetchall()]
    finally:
        conn.close()


def last_audit_id(server: ServerProcess) -> int:
    rows = audit_rows(server)
    return int(rows[-1]["id"]) if rows else 0


def row_bytes(row: dict[str, Any]) -> int:
    """What one audit row stores: its text as UTF-8 and its detail's bytes."""
    size = 0
    for key in ("principal", "role", "action", "target", "outcome"):
        value = row[key]
        size += len(value.encode("utf-8", "surrogatepass")) if value is not None else 0
    return size + (len(bytes(row["detail"])) if row["detail"] is not None else 0)


def assert_error_shape(response: httpx.Response, where: str) -> None:
    assert response.status_code < 500, f"{where}: {response.status_code} {response.text[:300]}"
    assert 400 <= response.status_code < 500, f"{where}: {response.status_code} {response.text[:300]}"
    body = response.json()
    assert set(body) == {"error"} and set(body["error"]) == {"code", "message"}, (where, body)


def concrete(pattern: str, segment: str) -> str:
    return pattern.replace("([^/]+)", segment)


async def test_hostile_ids_on_every_route_are_4xx_decoded_once_and_audited_within_bounds(
    server: ServerProcess, tokens: dict[str, str], http: httpx.AsyncClient
) -> None:
    before, first = tables(server), last_audit_id(server)
    sent = 0
    for rule in ID_RULES:
        for label, segment in HOSTILE.items():
            path = concrete(rule.pattern.pattern, segment)
            for role in ROLES:
                headers = {} if role == "anonymous" else {"Authorization": f"Bearer {tokens[role]}"}
                # An empty object: no route changes anything with it, so only the audit may grow.
                body = None if rule.method == "GET" else {}
                response = await http.request(rule.method, path, json=body, headers=headers)
                sent += 1
                assert_error_shape(response, f"{rule.method} {rule.action} {label} as {role}")
    assert (await http.get("/readyz")).status_code == 200
    assert tables(server) == before  # nothing but audit rows was written
    added = audit_rows(server, first)
    assert len(added) <= sent
    for row in added:
        target = row["target"] or ""
        assert len(target) <= MAX_AUDIT_TARGET, (row["action"], len(target))
        assert "\x00" not in target and not any("\ud800" <= c <= "\udfff" for c in target), row
        assert row["detail"] is None or len(bytes(row["detail"])) <= MAX_AUDIT_DETAIL
        assert row_bytes(row) <= 1024, row
    # Decoded once: a worker's denied decision on /approvals/%2500/decide is recorded under the
    # id the route saw, the three characters "%00", not under a NUL.
    denied = [
        r
        for r in added
        if (r["principal"], r["action"], r["outcome"]) == ("worker", "approval.decide", "denied")
    ]
    assert "%00" in {r["target"] for r in denied}, denied
    for kind, action in (("reviewer", "traverser.cancel"), ("worker", "hook.resume")):
        targets = {r["target"] for r in added if (r["role"], r["action"]) == (kind, action)}
        assert "%00" in targets, (kind, action, targets)
    # Anonymous denials are recorded at most once per action from one address in this burst.
    anonymous = [(r["action"], r["outcome"]) for r in added if r["principal"] == "anonymous"]
    assert len(anonymous) == len(set(anonymous)), anonymous
    assert "Traceback" not in server.log.read_text(errors="replace")


async def test_a_hundred_anonymous_requests_add_at_most_a_few_kb_of_audit(tmp_path: Path) -> None:
    server = ServerProcess(tmp_path)  # a server of its own: no earlier anonymous attempt counts
    server.start()
    try:
        first = last_audit_id(server)
        long_id, max_id = "x" * 30_000, "y" * 200
        async with httpx.AsyncClient(base_url=server.url, timeout=30) as http:
            for _ in range(100):
                response = await http.post(
                    f"/api/v2/approvals/{long_id}/decide", json={"decision": "approved"}
                )
                assert_error_shape(response, "30,000-character id")
                assert response.status_code == 404
            assert audit_rows(server, first) == []  # refused before the audit trail
            # Ids of the longest allowed length, on each route an anonymous denial is audited on.
            paths = (
                f"/api/v2/approvals/{max_id}/decide",
                f"/api/v2/hooks/{max_id}/resume",
                f"/api/v2/tokens/{max_id}/revoke",
            )
            for path in paths:
                for _ in range(100):
                    response = await http.post(path, json={})
                    assert response.status_code == 401, response.text
        added = audit_rows(server, first)
        total = sum(row_bytes(r) for r in added)
        # One row per (action, address) in this burst: 3 rows of a few hundred bytes for 400 requests.
        assert [(r["principal"], r["action"], r["target"]) for r in added] == [
            ("anonymous", action, path) for action, path in zip(ANONYMOUS_ACTIONS, paths, strict=True)
        ]
        assert total <= 4096, (len(added), total)
    finally:
        server.close()


async def test_values_postgresql_refuses_are_4xx_on_both_backends(
    server: ServerProcess, http: httpx.AsyncClient
) -> None:
    """Numbers over PostgreSQL's integer and names over its index entry size are refused before
    the database, so both backends answer the same 4xx and store nothing; the largest allowed
    values are stored on both."""
    owner = {"Authorization": f"Bearer {server.token('owner')}"}
    before = tables(server)
    worker = {"node_id": "n-range", "version": "1", "capacity": 2**31}
    response = await http.post("/api/v2/workers", json=worker, headers=owner)
    assert_error_shape(response, "capacity 2**31")
    assert response.json()["error"]["code"] == "validation_error"
    # Incompressible names (random CJK) too long for a B-tree entry of the memory table's key.
    rng = random.Random(7)
    name = "".join(chr(rng.randrange(0x4E00, 0x9FFF)) for _ in range(3000))
    response = await http.put(f"/api/v2/memory/{name}/{name}", json={"value": 1}, headers=owner)
    assert_error_shape(response, "3,000-character memory scope and key")
    assert tables(server) == before
    # The limits themselves fit: 200 such characters in both parts of the key, capacity 2**31 - 1.
    scope, key = name[:200], name[200:400]
    response = await http.put(f"/api/v2/memory/{scope}/{key}", json={"value": 1}, headers=owner)
    assert response.status_code == 200, response.text[:300]
    assert (await http.get(f"/api/v2/memory/{scope}/{key}", headers=owner)).json()["value"] == 1
    response = await http.post("/api/v2/workers", json={**worker, "capacity": 2**31 - 1}, headers=owner)
    assert response.status_code == 201, response.text[:300]
    assert "Traceback" not in server.log.read_text(errors="replace")
