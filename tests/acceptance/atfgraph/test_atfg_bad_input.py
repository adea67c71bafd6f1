"""Rule 9: every route answers wrong, missing, oversize and hostile input with a 4xx in one JSON
error shape with a stable code, changes nothing, and never answers 5xx."""

from __future__ import annotations

import asyncio
from collections.abc import AsyncIterator, Iterator
from typing import Any
from urllib.parse import quote

import httpx
import pytest
from atfg_harness import ServerProcess

MIB = 1024 * 1024

# (method, path, a well-formed body) for every route that reads a body; {t} is a real traverser,
# {w} a real worker, {a} a real approval.
BODY_ROUTES = [
    ("POST", "/api/v2/traversers", {"target": "tester.pausing", "input": {}}),
    ("POST", "/api/v2/traversers/{t}/complete", {"epoch": 1, "result": 1}),
    ("POST", "/api/v2/traversers/{t}/fail", {"epoch": 1, "error": {"code": "c", "message": "m"}}),
    ("POST", "/api/v2/traversers/{t}/release", {"epoch": 1}),
    ("PUT", "/api/v2/traversers/{t}/checkpoints/c", {"epoch": 1, "value": 1}),
    (
        "POST",
        "/api/v2/approvals",
        {"traverser_id": "{t}", "operation_key": "k", "prompt": "p", "pause": False},
    ),
    ("POST", "/api/v2/approvals/{a}/decide", {"decision": "approved"}),
    ("POST", "/api/v2/workers", {"node_id": "n", "version": "1", "capacity": 1}),
    ("POST", "/api/v2/workers/{w}/claim", {"max": 1}),
    ("POST", "/api/v2/workers/{w}/heartbeat", {"leases": []}),
    ("PUT", "/api/v2/memory/s/k", {"value": 1}),
]

# Wrongly typed or missing fields, per route (each must be 422 validation_error).
WRONG_FIELDS: dict[str, list[dict[str, Any]]] = {
    "/api/v2/traversers": [
        {},
        {"target": 5},
        {"target": "nodot"},
        {"target": ".x"},
        {"target": "a.b", "input": [1]},
        {"target": "a.b", "max_attempts": 0},
        {"target": "a.b", "max_attempts": "3"},
        {"target": "a.b", "max_attempts": True},
        {"target": "a.b", "max_attempts": 10**30},
        {"target": "x" * 10_000 + ".y"},
    ],
    "/api/v2/traversers/{t}/complete": [
        {},
        {"epoch": "1"},
        {"epoch": -1},
        {"epoch": 1, "steps": "no"},
        {"epoch": 1, "claim": 1},
        {"epoch": 1, "claim": {"max": 1}},
        {"epoch": 1, "claim": {"worker_id": "{w}"}},
        {"epoch": 1, "claim": {"worker_id": "{w}", "max": 0}},
        {"epoch": 1, "claim": {"worker_id": "{w}", "max": 101}},
    ],
    "/api/v2/traversers/{t}/fail": [
        {"epoch": 1},
        {"epoch": 1, "error": "boom"},
        {"epoch": 1, "error": {"code": 1, "message": "m"}},
        {"epoch": 1, "error": {"code": "c", "message": 5}},
        {"epoch": 1, "error": {"code": "c", "message": "m"}, "retryable": "yes"},
    ],
    "/api/v2/traversers/{t}/release": [{"epoch": None}, {"epoch": 1.5}],
    "/api/v2/traversers/{t}/checkpoints/c": [
        {"epoch": 1},
        {"value": 1},
        {"epoch": 1, "value": 1, "expected_revision": -1},
        {"epoch": 1, "value": 1, "steps": [{"key": "k"}]},
        {"epoch": 1, "value": 1, "steps": [{"key": "k", "seq": 1, "target": "a.b", "status": "weird"}]},
    ],
    "/api/v2/approvals": [
        {"operation_key": "k", "prompt": "p"},
        {"traverser_id": "{t}", "prompt": "p"},
        {"traverser_id": "{t}", "operation_key": "k"},
        {"traverser_id": "{t}", "operation_key": "", "prompt": "p"},
        {"traverser_id": "{t}", "operation_key": "k", "prompt": "p", "pause": "no"},
        {"traverser_id": "{t}", "operation_key": "k", "prompt": "p", "expires_in_seconds": -1},
        {"traverser_id": "{t}", "operation_key": "k", "prompt": "p", "expires_in_seconds": "soon"},
        {"traverser_id": "{t}", "operation_key": "k", "prompt": "p", "claim": []},
        {
            "traverser_id": "{t}",
            "operation_key": "k",
            "prompt": "p",
            "claim": {"worker_id": "{w}", "max": "1"},
        },
    ],
    "/api/v2/approvals/{a}/decide": [{}, {"decision": "maybe"}, {"decision": "pending"}, {"decision": 1}],
    "/api/v2/workers": [
        {"node_id": "n", "version": "1"},
        {"node_id": "a.b", "version": "1", "capacity": 1},
        {"node_id": "n", "version": "1", "capacity": 0},
        {"node_id": "n", "version": 1, "capacity": 1},
    ],
    "/api/v2/workers/{w}/claim": [{}, {"max": 0}, {"max": 101}, {"max": 1, "wait_seconds": 3600}],
    "/api/v2/workers/{w}/heartbeat": [{"leases": {}}, {"leases": [1]}, {"leases": [{"id": "x"}]}],
    "/api/v2/memory/s/k": [{}, {"value": 1, "traverser_id": "t"}, {"value": 1, "expected_revision": "0"}],
}


@pytest.fixture(scope="module")
def server(tmp_path_factory: pytest.TempPathFactory) -> Iterator[ServerProcess]:
    """One server for the whole module: bad input must not change or break it."""
    proc = ServerProcess(tmp_path_factory.mktemp("bad-input"))
    proc.start()
    yield proc
    proc.close()


@pytest.fixture
async def http(server: ServerProcess) -> AsyncIterator[httpx.AsyncClient]:
    async with httpx.AsyncClient(base_url=server.url, headers=server.headers(), timeout=30) as c:
        yield c


@pytest.fixture
async def ids(http: httpx.AsyncClient) -> dict[str, str]:
    trav = (await http.post("/api/v2/traversers", json={"target": "tester.pausing"})).json()["id"]
    worker = (
        await http.post("/api/v2/workers", json={"node_id": "nobody", "version": "1", "capacity": 1})
    ).json()
    approval = await http.post(
        "/api/v2/approvals", json={"traverser_id": trav, "operation_key": "k0", "prompt": "p", "pause": False}
    )
    return {"t": trav, "w": worker["id"], "a": approval.json()["approval"]["id"]}


def fill(template: Any, ids: dict[str, str]) -> Any:
    if isinstance(template, str):
        return template.format(**ids) if template in ("{t}", "{w}", "{a}") else template
    if isinstance(template, dict):
        return {k: fill(v, ids) for k, v in template.items()}
    return template


def assert_error(response: httpx.Response, status: int | tuple[int, ...], code: str | None = None) -> None:
    allowed = (status,) if isinstance(status, int) else status
    assert response.status_code in allowed, (response.status_code, response.text[:300])
    body = response.json()
    assert set(body) == {"error"} and set(body["error"]) == {"code", "message"}, body
    assert isinstance(body["error"]["message"], str) and body["error"]["message"]
    if code is not None:
        assert body["error"]["code"] == code, body


def deep(levels: int) -> bytes:
    return b'{"value":' + b"[" * levels + b"]" * levels + b"}"


@pytest.mark.parametrize(("method", "path", "good"), BODY_ROUTES, ids=[f"{m} {p}" for m, p, _ in BODY_ROUTES])
async def test_rule9_body_routes_reject_bad_bodies(
    http: httpx.AsyncClient, ids: dict[str, str], method: str, path: str, good: dict[str, Any]
) -> None:
    url = path.format(**ids)
    send = lambda content, **kw: http.request(method, url, content=content, **kw)  # noqa: E731
    assert_error(await send(b""), 400, "invalid_json")
    assert_error(await send(b"{not json"), 400, "invalid_json")
    assert_error(await send(b"\xff\xfe\x00"), 400, "invalid_json")
    assert_error(await send(b"[1, 2]"), 422, "validation_error")
    assert_error(await send(b'"text"'), 422, "validation_error")
    assert_error(await send(b"null"), 422, "validation_error")
    # Over 1 MiB: refused by its declared length, and when streamed without one.
    assert_error(await send(b'{"pad": "' + b"x" * MIB + b'"}'), 413, "payload_too_large")

    async def chunks() -> AsyncIterator[bytes]:
        for _ in range(20):
            yield b" " * (MIB // 10)

    assert_error(await http.request(method, url, content=chunks()), 413, "payload_too_large")
    # Nesting: 65 levels and a stack-bomb of 100,000 are refused; 64 levels are read.
    assert_error(await send(deep(65)), 400, "json_too_deep")
    assert_error(await send(deep(100_000)), 400)
    assert (await send(deep(63))).status_code < 500
    for wrong in WRONG_FIELDS[path]:
        assert_error(await http.request(method, url, json=fill(wrong, ids)), 422, "validation_error")
    # Hostile but valid JSON never breaks the server.
    for hostile in ({**good, "extra": "\u0000\ud7ff" * 10}, {**good, "value": 1e308}, {"🙂": [None] * 1000}):
        response = await http.request(method, url, json=fill(hostile, ids))
        assert response.status_code < 500, response.text


UNKNOWN = [
    ("GET", "/api/v2/traversers/nope"),
    ("GET", "/api/v2/traversers/nope/path"),
    ("POST", "/api/v2/traversers/nope/cancel"),
    ("GET", "/api/v2/traversers/nope/checkpoints/c"),
    ("PUT", "/api/v2/traversers/nope/checkpoints/c"),
    ("POST", "/api/v2/traversers/nope/complete"),
    ("POST", "/api/v2/traversers/nope/fail"),
    ("POST", "/api/v2/traversers/nope/release"),
    ("GET", "/api/v2/approvals/nope"),
    ("POST", "/api/v2/approvals/nope/decide"),
    ("GET", "/api/v2/workers/nope"),
    ("POST", "/api/v2/workers/nope/claim"),
    ("POST", "/api/v2/workers/nope/heartbeat"),
    ("GET", "/api/v2/memory/no/pe"),
    ("GET", "/api/v2/no-such-route"),
]
VALID_BODIES = {
    "checkpoints": {"epoch": 1, "value": 1},
    "complete": {"epoch": 1},
    "fail": {"epoch": 1, "error": {"code": "c", "message": "m"}},
    "release": {"epoch": 1},
    "decide": {"decision": "approved"},
    "claim": {"max": 1},
    "heartbeat": {"leases": []},
    "cancel": {},
}


@pytest.mark.parametrize(("method", "path"), UNKNOWN, ids=[f"{m} {p}" for m, p in UNKNOWN])
async def test_rule9_unknown_ids_are_404(http: httpx.AsyncClient, method: str, path: str) -> None:
    body = next(
        (b for k, b in VALID_BODIES.items() if path.rsplit("/", 2)[-1] == k or f"/{k}/" in path), None
    )
    if method == "GET":
        body = None
    response = await http.request(method, path, json=body)
    assert_error(response, 404, "not_found")


async def test_rule9_queries_and_methods(http: httpx.AsyncClient, ids: dict[str, str]) -> None:
    assert_error(await http.get("/api/v2/traversers", params={"status": "bogus"}), 422, "validation_error")
    assert_error(await http.get("/api/v2/traversers", params={"limit": "many"}), 422, "validation_error")
    assert_error(await http.get("/api/v2/traversers", params={"limit": 10**6}), 422, "validation_error")
    assert_error(await http.get("/api/v2/approvals", params={"status": "bogus"}), 422, "validation_error")
    t = ids["t"]
    assert_error(
        await http.get(f"/api/v2/traversers/{t}", params={"wait_for": "nah"}), 422, "validation_error"
    )
    assert_error(await http.get(f"/api/v2/traversers/{t}", params={"timeout": -1}), 422, "validation_error")
    assert_error(await http.get(f"/api/v2/traversers/{t}", params={"timeout": "inf"}), 422)
    assert_error(await http.delete(f"/api/v2/traversers/{t}"), 405, "method_not_allowed")
    # A declared length over the limit is refused before the body is read (none is sent here).
    reader, writer = await asyncio.open_connection(http.base_url.host, http.base_url.port)
    auth = http.headers["authorization"].encode()
    writer.write(
        b"POST /api/v2/traversers HTTP/1.1\r\nHost: x\r\nAuthorization: " + auth + b"\r\n"
        b"Content-Length: 5242880\r\n\r\n"
    )
    await writer.drain()
    head = await asyncio.wait_for(reader.readuntil(b"\r\n\r\n"), 10)
    assert head.startswith(b"HTTP/1.1 413")
    writer.close()
    # Nothing above changed the traverser; it is still queued for its first claim.
    view = (await http.get(f"/api/v2/traversers/{t}")).json()
    assert (view["status"], view["attempt"]) == ("queued", 0)


async def test_rule9_lease_and_state_errors_are_409(http: httpx.AsyncClient, ids: dict[str, str]) -> None:
    t = ids["t"]
    assert_error(await http.post(f"/api/v2/traversers/{t}/complete", json={"epoch": 0}), 409, "lease_lost")
    body = {"traverser_id": t, "operation_key": "p", "prompt": "p"}  # pause defaults to true
    assert_error(await http.post("/api/v2/approvals", json=body), 409, "lease_required")
    await http.post(f"/api/v2/traversers/{t}/cancel")
    assert_error(await http.post("/api/v2/approvals", json={**body, "pause": False}), 409, "invalid_state")


async def test_rule9_hostile_path_segments(http: httpx.AsyncClient) -> None:
    for ident in ("x" * 8000, "é🙂", "%2F..%2F..", "'; DROP TABLE atfg_traversers; --", "\u0000"):
        quoted = quote(ident, safe="")
        for method, path in (
            ("GET", f"/api/v2/traversers/{quoted}"),
            ("GET", f"/api/v2/approvals/{quoted}"),
            ("GET", f"/api/v2/traversers/{quoted}/checkpoints/{quoted}"),
            ("POST", f"/api/v2/approvals/{quoted}/decide"),
        ):
            body = {"decision": "approved"} if method == "POST" else None
            assert_error(await http.request(method, path, json=body), 404, "not_found")
    assert (await http.get("/api/v2/traversers", params={"status": "queued"})).status_code == 200


async def test_rule9_nul_in_names_is_refused_and_changes_nothing(
    http: httpx.AsyncClient, ids: dict[str, str]
) -> None:
    """No stored name can hold NUL (PostgreSQL's text refuses it): a body field is a 422, a query
    a 400, a path a 404, on either backend, and the server's state is what it was."""
    before = (await http.get("/api/v2/approvals", params={"traverser_id": ids["t"], "status": "all"})).json()
    t = ids["t"]
    for body in (
        {"target": "tester.pausing\u0000"},
        {"target": "tester.pausing", "idempotency_key": "k\u0000"},
    ):
        assert_error(await http.post("/api/v2/traversers", json=body), 422, "validation_error")
    approval = {"traverser_id": t, "operation_key": "op\u0000", "prompt": "p", "pause": False}
    assert_error(await http.post("/api/v2/approvals", json=approval), 422, "validation_error")
    worker = {"node_id": "n\u0000", "version": "1", "capacity": 1}
    assert_error(await http.post("/api/v2/workers", json=worker), 422, "validation_error")
    assert_error(
        await http.get("/api/v2/approvals", params={"traverser_id": "x\u0000"}), 400, "invalid_request"
    )
    assert_error(await http.get("/api/v2/audit", params={"target": "\u0000"}), 400, "invalid_request")
    assert_error(await http.get("/api/v2/memory/s%00/k"), 404, "not_found")
    assert_error(await http.post("/api/v2/tokens", json={"name": "a\u0000b", "role": "reviewer"}), (400, 422))
    after = (await http.get("/api/v2/approvals", params={"traverser_id": t, "status": "all"})).json()
    assert after == before
    assert (await http.get("/readyz")).status_code == 200


async def test_openapi_and_probes(http: httpx.AsyncClient) -> None:
    doc = (await http.get("/api/v2/openapi.json")).json()
    assert "/api/v2/approvals/{approval_id}/decide" in doc["paths"]
    assert (await http.get("/livez")).json() == {"status": "ok"}
    assert (await http.get("/readyz")).json() == {"status": "ready"}
