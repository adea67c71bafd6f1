"""Decision links (``/d/<secret>``) and webhooks (``POST /api/v2/webhooks/{id}``) against a real
server: a link decides once and then says it was used, a revoked or expired one decides nothing,
only its digest is stored; a webhook resumes an approval or a pyworkflow hook when its body is
signed, is idempotent for the same body, 409 for a different decision, and 401 for a bad
signature with nothing changed."""

from __future__ import annotations

import asyncio
import hashlib
import hmac
import json
import re
import subprocess
import sys
import time
from collections.abc import AsyncIterator, Callable
from pathlib import Path
from typing import Any

import httpx
import pytest
from atfg_harness import ServerProcess, WorkerProcess, database_dump, wait_until
from atfg_waits import only_approval, reach

import pyworkflow
from atfgraph import Client
from pyworkflow import hook, workflow

ATFG = str(Path(sys.executable).parent / "atfg")


@pytest.fixture
async def http(server: ServerProcess) -> AsyncIterator[httpx.AsyncClient]:
    async with httpx.AsyncClient(base_url=server.url, headers=server.headers(), timeout=30) as c:
        yield c


def create_token(server: ServerProcess, name: str, role: str) -> dict[str, str]:
    r = httpx.post(
        server.url + "/api/v2/tokens", json={"name": name, "role": role}, headers=server.headers(), timeout=10
    )
    assert r.status_code == 201, r.text
    return {"authorization": f"Bearer {r.json()['token']}"}


async def pending_approval(http: httpx.AsyncClient, prompt: Any = "Refund 480 AUD?") -> str:
    """A pending approval on a queued traverser (no worker needed: it does not pause)."""
    trav = (await http.post("/api/v2/traversers", json={"target": "nobody.skill"})).json()["id"]
    body = {"traverser_id": trav, "operation_key": "k", "prompt": prompt, "pause": False}
    r = await http.post("/api/v2/approvals", json=body)
    assert r.status_code == 200, r.text
    approval_id: str = r.json()["approval"]["id"]
    return approval_id


async def mint_link(http: httpx.AsyncClient, approval_id: str, **body: Any) -> dict[str, Any]:
    r = await http.post(f"/api/v2/approvals/{approval_id}/links", json=body)
    assert r.status_code == 201, r.text
    minted: dict[str, Any] = r.json()
    return minted


def assert_error(response: httpx.Response, status: int, code: str) -> None:
    assert response.status_code == status, (response.status_code, response.text[:300])
    body = response.json()
    assert set(body) == {"error"} and body["error"]["code"] == code and body["error"]["message"], body


def message(html: str) -> str:
    found = re.search(r'role="status">([^<]*)<', html)
    assert found, html
    return found.group(1)


# -- decision links ----------------------------------------------------------------------------


async def test_a_decision_link_decides_once_and_then_says_it_was_used(
    server: ServerProcess, http: httpx.AsyncClient
) -> None:
    approval_id = await pending_approval(http, {"question": "Refund <b>480</b> AUD?"})
    reviewer = create_token(server, "rita", "reviewer")
    r = await http.post(
        f"/api/v2/approvals/{approval_id}/links", json={"label": "ops@example.com"}, headers=reviewer
    )
    assert r.status_code == 201, r.text
    minted = r.json()
    url, link = minted["url"], minted["link"]
    assert url.startswith(server.url + "/d/") and "secret" not in minted
    assert (link["state"], link["label"], link["created_by"], link["kind"]) == (
        "live",
        "ops@example.com",
        "rita",
        "page",
    )
    secret = url.rsplit("/", 1)[1]

    async with httpx.AsyncClient(timeout=30) as anonymous:  # no token, no session: the link is enough
        page = await anonymous.get(url)
        assert page.status_code == 200
        assert (
            page.headers["referrer-policy"] == "no-referrer" and page.headers["cache-control"] == "no-store"
        )
        assert "Refund &lt;b&gt;480&lt;/b&gt; AUD?" in page.text and "Approve" in page.text
        done = await anonymous.post(url, data={"decision": "approved", "response": "checked the log"})
        assert done.status_code == 200 and "Thank you: approved" in message(done.text)
        again = await anonymous.get(url)
        assert again.status_code == 410 and message(again.text) == "This link was already used (approved)."
        assert "<form" not in again.text
        replay = await anonymous.post(url, data={"decision": "rejected"})
        assert replay.status_code == 410 and "already used" in replay.text

    approval = (await http.get(f"/api/v2/approvals/{approval_id}")).json()
    assert approval["status"] == "approved"
    assert approval["decided_by"] == f"link:{link['id']}"
    assert approval["response"] == {"note": "checked the log"}
    trail = (await http.get("/api/v2/audit", params={"target": approval_id})).json()["items"]
    decided = [e for e in trail if e["action"] == "approval.decide"]
    assert [(e["outcome"], e["principal"]) for e in decided] == [
        ("refused", f"link:{link['id']}"),
        ("allowed", f"link:{link['id']}"),
    ]
    assert decided[1]["detail"]["link_id"] == link["id"]
    created = [e for e in trail if e["action"] == "approval.link.create"]
    assert created[0]["principal"] == "rita" and created[0]["detail"]["link_id"] == link["id"]
    links = (await http.get(f"/api/v2/approvals/{approval_id}/links")).json()["items"]
    assert [(x["id"], x["state"], x["decision"]) for x in links] == [(link["id"], "used", "approved")]
    # Only the digest is stored: the secret appears nowhere in the database.
    dump = database_dump(server)
    assert secret not in dump


async def test_a_revoked_or_expired_link_decides_nothing(
    server: ServerProcess, http: httpx.AsyncClient
) -> None:
    approval_id = await pending_approval(http)
    revoked = await mint_link(http, approval_id)
    r = await http.post(f"/api/v2/links/{revoked['link']['id']}/revoke")
    assert r.status_code == 200 and r.json()["link"]["state"] == "revoked"
    short = await mint_link(http, approval_id, expires_in_seconds=0.5)
    async with httpx.AsyncClient(timeout=30) as anonymous:
        page = await anonymous.get(revoked["url"])
        assert page.status_code == 410 and message(page.text) == "This link was revoked."
        post = await anonymous.post(revoked["url"], data={"decision": "approved"})
        assert post.status_code == 410
        wait_until(
            lambda: httpx.get(short["url"], timeout=10).status_code == 410, 15, "the short link never expired"
        )
        assert message((await anonymous.get(short["url"])).text) == "This link has expired."
        assert (await anonymous.post(short["url"], data={"decision": "approved"})).status_code == 410
        # Unknown, malformed, or the right id with a wrong secret: 404, the same page.
        wrong = revoked["url"][:-4] + "AAAA"
        for bad in (server.url + "/d/nope", wrong, server.url + "/d/" + "0" * 16 + "_" + "x" * 32):
            assert (await anonymous.get(bad)).status_code == 404
            assert (await anonymous.post(bad, data={"decision": "approved"})).status_code == 404
    assert (await http.get(f"/api/v2/approvals/{approval_id}")).json()["status"] == "pending"
    states = {
        x["id"]: x["state"]
        for x in (await http.get(f"/api/v2/approvals/{approval_id}/links")).json()["items"]
    }
    assert states == {revoked["link"]["id"]: "revoked", short["link"]["id"]: "expired"}


async def test_minting_links_needs_a_reviewer_and_a_pending_approval(
    server: ServerProcess, http: httpx.AsyncClient
) -> None:
    approval_id = await pending_approval(http)
    worker = {"authorization": f"Bearer {server.token('worker')}"}
    assert_error(
        await http.post(f"/api/v2/approvals/{approval_id}/links", json={}, headers=worker), 403, "forbidden"
    )
    async with httpx.AsyncClient(base_url=server.url, timeout=10) as anonymous:
        assert_error(
            await anonymous.post(f"/api/v2/approvals/{approval_id}/links", json={}), 401, "unauthenticated"
        )
    assert_error(await http.post("/api/v2/approvals/nope/links", json={}), 404, "not_found")
    for body in ({"expires_in_seconds": 0}, {"expires_in_seconds": 10**9}, {"label": 7}, {"label": "a\nb"}):
        assert_error(
            await http.post(f"/api/v2/approvals/{approval_id}/links", json=body), 422, "validation_error"
        )
    # No body at all: the defaults (a day).
    r = await http.post(f"/api/v2/approvals/{approval_id}/links")
    assert r.status_code == 201 and r.json()["link"]["expires_at"] == pytest.approx(
        time.time() + 86400, abs=60
    )
    await http.post(f"/api/v2/approvals/{approval_id}/decide", json={"decision": "rejected"})
    assert_error(await http.post(f"/api/v2/approvals/{approval_id}/links", json={}), 409, "wait_not_pending")
    # A live link on an approval decided meanwhile says so and decides nothing.
    async with httpx.AsyncClient(timeout=10) as anonymous:
        page = await anonymous.get(r.json()["url"])
        assert page.status_code == 410 and "This approval is rejected" in page.text
        post = await anonymous.post(r.json()["url"], data={"decision": "approved"})
        assert post.status_code == 409 and "Not recorded" in post.text
    assert (await http.get(f"/api/v2/approvals/{approval_id}")).json()["status"] == "rejected"
    assert_error(await http.post("/api/v2/links/0123456789abcdef/revoke"), 404, "not_found")


async def test_two_racing_uses_of_one_link_decide_once(
    server: ServerProcess, http: httpx.AsyncClient
) -> None:
    approval_id = await pending_approval(http)
    url = (await mint_link(http, approval_id))["url"]
    async with httpx.AsyncClient(timeout=30) as anonymous:
        answers = await asyncio.gather(
            *(anonymous.post(url, data={"decision": d}) for d in ("approved", "rejected") * 4)
        )
    assert sorted(a.status_code for a in answers)[0] == 200
    assert [a.status_code for a in answers].count(200) == 1, [a.status_code for a in answers]
    assert {a.status_code for a in answers} <= {200, 409, 410}


async def test_a_link_decision_continues_the_paused_traverser(
    server: ServerProcess, spawn_worker: Callable[..., WorkerProcess], client: Client, http: httpx.AsyncClient
) -> None:
    spawn_worker()
    handle = await client.submit("tester.pausing", {"prompt": "Go?"})
    await reach(client, handle.id, "waiting")
    approval = await only_approval(client, handle.id)
    spare = await client.create_decision_link(str(approval["id"]), label="spare")
    assert (await client.revoke_link(spare["link"]["id"]))["state"] == "revoked"
    url = (await client.create_decision_link(str(approval["id"]), expires_in_seconds=600))["url"]
    assert [x["state"] for x in await client.list_links(str(approval["id"]))] == ["revoked", "live"]
    async with httpx.AsyncClient(timeout=30) as anonymous:
        assert (await anonymous.post(url, data={"decision": "approved"})).status_code == 200
    result = await handle.result(timeout=30)
    assert result["decision"]["status"] == "approved"
    assert result["decision"]["decided_by"].startswith("link:")


# -- webhooks ----------------------------------------------------------------------------------


def outbox(server: ServerProcess) -> int:
    """How many created-wait events the server has not yet expanded (atfg_wait_events)."""
    sql = "SELECT COUNT(*) FROM atfg_wait_events"
    if server.on_postgres:
        import psycopg

        with psycopg.connect(server.db, autocommit=True) as pg:
            row = pg.execute(sql).fetchone()
    else:
        import sqlite3

        conn = sqlite3.connect(server.db_path)
        try:
            row = conn.execute(sql).fetchone()
        finally:
            conn.close()
    assert row is not None
    return int(row[0])


def unaudited(dump: str) -> str:
    """A database dump without the denials of webhook deliveries (and SQLite's row counter)."""
    return "\n".join(
        line
        for line in dump.splitlines()
        if "wait.webhook.resume" not in line and "sqlite_sequence" not in line
    )


def signed(secret: str, body: bytes, timestamp: int | None = None) -> dict[str, str]:
    ts = str(int(time.time()) if timestamp is None else timestamp)
    mac = hmac.new(secret.encode(), ts.encode() + b"." + body, hashlib.sha256).hexdigest()
    return {"x-atfg-timestamp": ts, "x-atfg-signature": f"sha256={mac}", "content-type": "application/json"}


async def mint_webhook(http: httpx.AsyncClient, wait_id: str) -> dict[str, Any]:
    r = await http.post(f"/api/v2/waits/{wait_id}/webhooks", json={"label": "billing"})
    assert r.status_code == 201, r.text
    minted: dict[str, Any] = r.json()
    return minted


async def test_a_signed_webhook_decides_an_approval_idempotently_and_a_bad_signature_is_401(
    server: ServerProcess, http: httpx.AsyncClient
) -> None:
    approval_id = await pending_approval(http)
    hook_ = await mint_webhook(http, approval_id)
    url, secret = hook_["url"], hook_["secret"]
    assert url == f"{server.url}/api/v2/webhooks/{hook_['link']['id']}" and secret.startswith("whsec_")
    body = b'{"decision": "approved", "response": {"ticket": "QF-4417"}}'
    # The server's notifier drains the outbox of the approval's creation in the background.
    wait_until(lambda: outbox(server) == 0, 20, "the outbox was never drained")
    async with httpx.AsyncClient(timeout=30) as machine:
        before = database_dump(server)
        bad = [
            {},  # unsigned
            signed("whsec_" + "0" * 64, body),  # the wrong secret
            signed(secret, body, int(time.time()) - 3600),  # a replay an hour later
            {**signed(secret, body), "x-atfg-signature": "sha256=zz"},
            signed(secret, body + b" "),  # the signature of another body
        ]
        for headers in bad:
            assert_error(await machine.post(url, content=body, headers=headers), 401, "unauthenticated")
        assert_error(
            await machine.post(
                server.url + "/api/v2/webhooks/0123456789abcdef", content=body, headers=signed(secret, body)
            ),
            401,
            "unauthenticated",
        )
        # Nothing changed but the audit trail's denials.
        assert unaudited(database_dump(server)) == unaudited(before)
        assert (await http.get(f"/api/v2/approvals/{approval_id}")).json()["status"] == "pending"

        first = await machine.post(url, content=body, headers=signed(secret, body))
        assert first.status_code == 200, first.text
        assert first.json()["approval"]["status"] == "approved"
        assert first.json()["approval"]["decided_by"] == f"webhook:{hook_['link']['id']}"
        again = await machine.post(url, content=body, headers=signed(secret, body))
        assert again.status_code == 200 and again.json()["approval"] == first.json()["approval"]
        other = b'{"decision": "rejected"}'
        assert_error(
            await machine.post(url, content=other, headers=signed(secret, other)), 409, "approval_decided"
        )
        invalid = b'{"decision": "maybe"}'
        assert_error(
            await machine.post(url, content=invalid, headers=signed(secret, invalid)), 422, "validation_error"
        )
    trail = (await http.get("/api/v2/audit", params={"target": approval_id})).json()["items"]
    assert f"webhook:{hook_['link']['id']}" in {
        e["principal"] for e in trail if e["action"] == "approval.decide"
    }
    # Revoked: a correctly signed body is refused.
    approval_2 = await pending_approval(http)
    hook_2 = await mint_webhook(http, approval_2)
    await http.post(f"/api/v2/links/{hook_2['link']['id']}/revoke")
    async with httpx.AsyncClient(timeout=30) as machine:
        r = await machine.post(hook_2["url"], content=body, headers=signed(hook_2["secret"], body))
        assert_error(r, 409, "webhook_revoked")
    assert (await http.get(f"/api/v2/approvals/{approval_2}")).json()["status"] == "pending"


@workflow
async def webhook_signed_off(doc: str) -> dict[str, Any]:
    answer = await hook(
        "sign_off",
        payload_schema={"type": "object", "required": ["ok"], "properties": {"ok": {"type": "boolean"}}},
    )
    return {"doc": doc, "answer": answer}


async def test_a_signed_webhook_resumes_a_pyworkflow_hook_with_its_schema_enforced(
    server: ServerProcess, http: httpx.AsyncClient
) -> None:
    pyworkflow.configure(storage=server.storage_url, poll_interval=0.05)
    try:
        run_id = await pyworkflow.start(webhook_signed_off, "notes")
        await pyworkflow.wait_for_run(run_id, timeout=15, until=("suspended",))
        hook_id = (await http.get("/api/v2/hooks")).json()["items"][0]["id"]
        minted = await mint_webhook(http, hook_id)
        url, secret = minted["url"], minted["secret"]
        async with httpx.AsyncClient(timeout=30) as machine:
            wrong = b'{"payload": {"ok": "yes"}}'
            assert_error(
                await machine.post(url, content=wrong, headers=signed(secret, wrong)), 422, "payload_invalid"
            )
            body = b'{"payload": {"ok": true}}'
            first = await machine.post(url, content=body, headers=signed(secret, body))
            assert first.status_code == 200, first.text
            assert first.json() == {
                "kind": "hook",
                "hook_id": hook_id,
                "run_id": run_id,
                "status": "received",
            }
            again = await machine.post(url, content=body, headers=signed(secret, body))
            assert again.status_code == 200 and again.json() == first.json()
            other = b'{"payload": {"ok": false}}'
            assert_error(
                await machine.post(url, content=other, headers=signed(secret, other)), 409, "hook_not_pending"
            )
        run = await pyworkflow.wait_for_run(run_id, timeout=15)
        assert run.result == {"doc": "notes", "answer": {"ok": True}}
    finally:
        await pyworkflow.shutdown()
        pyworkflow.configure()


# -- the command line and the public URL ---------------------------------------------------------


def atfg(server: ServerProcess, *args: str) -> Any:
    """``atfg ... -o json`` as the owner; its JSON answer."""
    done = subprocess.run(
        [ATFG, *args, "-o", "json"],
        env=server.env,
        cwd=server.home,
        capture_output=True,
        text=True,
        timeout=60,
    )
    assert done.returncode == 0, (done.returncode, done.stdout, done.stderr)
    return json.loads(done.stdout)


async def test_atfg_mints_lists_and_revokes_links_on_the_configured_public_url(tmp_path: Path) -> None:
    server = ServerProcess(tmp_path)
    server.env["ATFGRAPH_PUBLIC_URL"] = "https://review.example.com/"
    server.start()
    try:
        async with httpx.AsyncClient(base_url=server.url, headers=server.headers(), timeout=30) as http:
            approval_id = await pending_approval(http)
        created = atfg(
            server, "approvals", "link", "create", approval_id, "--label", "ops", "--expires-in", "600"
        )
        assert created["url"].startswith("https://review.example.com/d/")
        secret = created["url"].rsplit("/", 1)[1]
        webhook = atfg(server, "hooks", "webhook", approval_id)
        assert webhook["url"] == f"https://review.example.com/api/v2/webhooks/{webhook['link']['id']}"
        listed = atfg(server, "approvals", "link", "list", approval_id)
        assert [(x["kind"], x["state"]) for x in listed] == [("page", "live"), ("webhook", "live")]
        revoked = atfg(server, "approvals", "link", "revoke", created["link"]["id"])
        assert revoked["link"]["state"] == "revoked"
        # The page itself is served wherever the server listens.
        page = httpx.get(f"{server.url}/d/{secret}", timeout=10)
        assert page.status_code == 410 and "revoked" in page.text
    finally:
        server.close()


# -- a decision link asked for with its approval ----------------------------------------------


async def test_a_decision_link_made_with_its_approval_is_handed_out_once(
    server: ServerProcess, http: httpx.AsyncClient, client: Client
) -> None:
    trav = (await http.post("/api/v2/traversers", json={"target": "nobody.skill"})).json()["id"]
    body = {"traverser_id": trav, "operation_key": "k", "prompt": "Refund 480 AUD?", "pause": False,
            "decision_link": {"label": "ops@example.com", "expires_in_seconds": 600}}  # fmt: skip
    r = await http.post("/api/v2/approvals", json=body)
    assert r.status_code == 200, r.text
    answer = r.json()
    approval_id, minted = answer["approval"]["id"], answer["decision_link"]
    link = minted["link"]
    assert minted["url"].startswith(server.url + "/d/")
    assert (link["wait_id"], link["state"], link["label"], link["kind"]) == (
        approval_id, "live", "ops@example.com", "page"
    )  # fmt: skip
    assert 590 < link["expires_at"] - link["created_at"] <= 600
    # Asked again (a handler running again): the same approval, and no second link or URL.
    again = (await http.post("/api/v2/approvals", json=body)).json()
    assert again["approval"]["id"] == approval_id and "decision_link" not in again
    links = (await http.get(f"/api/v2/approvals/{approval_id}/links")).json()["items"]
    assert [x["id"] for x in links] == [link["id"]]
    trail = (await http.get("/api/v2/audit", params={"target": approval_id})).json()["items"]
    made = [e for e in trail if e["action"] == "approval.link.create"]
    assert (
        len(made) == 1 and made[0]["detail"]["link_id"] == link["id"] and made[0]["detail"]["with_approval"]
    )
    assert minted["url"].rsplit("/", 1)[1] not in database_dump(server)  # only its digest is stored
    async with httpx.AsyncClient(timeout=30) as anonymous:
        done = await anonymous.post(minted["url"], data={"decision": "rejected", "response": "no receipt"})
        assert done.status_code == 200 and "Thank you: rejected" in message(done.text)
    decided = await client.get_approval(approval_id)
    assert (decided["status"], decided["decided_by"]) == ("rejected", f"link:{link['id']}")

    # The Client asks the same way; the record of the created approval carries the link.
    other = await client.request_approval(trav, "And this?", operation_key="k2", decision_link=True)
    assert other["decision_link"]["link"]["wait_id"] == other["id"]
    assert other["decision_link"]["link"]["expires_at"] - other["decision_link"]["link"]["created_at"] > 86000


async def test_a_bad_decision_link_request_is_refused_and_creates_nothing(
    server: ServerProcess, http: httpx.AsyncClient
) -> None:
    trav = (await http.post("/api/v2/traversers", json={"target": "nobody.skill"})).json()["id"]
    base = {"traverser_id": trav, "operation_key": "k", "prompt": "ok?", "pause": False}
    for bad in ("yes", 1, {"expires_in_seconds": -5}, {"expires_in_seconds": "soon"}, {"label": 7},
                {"label": "x" * 300}, {"colour": "red"}, {"expires_in_seconds": 10**9}):  # fmt: skip
        r = await http.post("/api/v2/approvals", json={**base, "decision_link": bad})
        assert_error(r, 422, "validation_error")
    assigned = {**base, "decision_link": True, "assign_to": {"roles": ["reviewer"]}}
    r = await http.post("/api/v2/approvals", json=assigned)
    assert_error(r, 422, "validation_error")
    assert "assignment" in r.json()["error"]["message"]
    assert (await http.get("/api/v2/approvals", params={"traverser_id": trav})).json()["items"] == []


async def test_a_paused_handler_hands_its_decision_link_on_and_the_link_continues_it(
    server: ServerProcess, spawn_worker: Callable[..., WorkerProcess], client: Client, tmp_path: Path
) -> None:
    outbox = tmp_path / "outbox.txt"
    spawn_worker()
    handle = await client.submit(
        "tester.linked", {"prompt": {"question": "Refund 480 AUD?"}, "outbox": str(outbox)}
    )
    await reach(client, handle.id, "waiting")
    wait_until(lambda: outbox.exists() and outbox.read_text().strip() != "", 20, "no link was handed on")
    (url,) = outbox.read_text().split()
    async with httpx.AsyncClient(timeout=30) as anonymous:
        assert (await anonymous.post(url, data={"decision": "approved"})).status_code == 200
    result = await handle.result(timeout=30)
    assert result["decision"]["status"] == "approved" and result["decision"]["decided_by"].startswith("link:")
    assert outbox.read_text().split() == [url]  # the continuation asked again and got no second link
