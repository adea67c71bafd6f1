"""Reviewer policies against a real server and worker: an approval assigned to named principals
or a role may be decided only by them (403 ``not_assigned`` for anyone else, audited, nothing
changed), and one whose handler asked for an escalation is re-assigned with a new deadline when
it falls due instead of expiring."""

from __future__ import annotations

from collections.abc import Callable
from typing import Any

import httpx
import pytest
from atfg_harness import ServerProcess, WorkerProcess, wait_until
from atfg_waits import only_approval, reach

from atfgraph import Client


def token(server: ServerProcess, name: str, role: str) -> dict[str, str]:
    r = httpx.post(
        server.url + "/api/v2/tokens", json={"name": name, "role": role}, headers=server.headers(), timeout=10
    )
    assert r.status_code == 201, r.text
    return {"authorization": f"Bearer {r.json()['token']}"}


def call(server: ServerProcess, method: str, path: str, headers: dict[str, str], **kw: Any) -> httpx.Response:
    return httpx.request(method, server.url + "/api/v2" + path, headers=headers, timeout=10, **kw)


def get(server: ServerProcess, approval_id: str) -> dict[str, Any]:
    view: dict[str, Any] = call(server, "GET", f"/approvals/{approval_id}", server.headers()).json()
    return view


def assert_error(response: httpx.Response, status: int, code: str) -> None:
    assert response.status_code == status, (response.status_code, response.text[:300])
    assert response.json()["error"]["code"] == code, response.text


async def test_an_assigned_approval_cannot_be_decided_by_another_reviewer(
    server: ServerProcess, spawn_worker: Callable[..., WorkerProcess], client: Client
) -> None:
    spawn_worker()
    rita, sam = token(server, "rita", "reviewer"), token(server, "sam", "reviewer")
    handle = await client.submit("tester.assigned", {"assign_to": {"principals": ["rita"]}})
    await reach(client, handle.id, "waiting")
    approval_id = str((await only_approval(client, handle.id))["id"])
    assert get(server, approval_id)["assignment"] == {
        "roles": [],
        "principals": ["rita"],
        "escalate": None,
        "escalates_at": None,
        "escalates_at_iso": None,
        "escalations": 0,
    }
    # Sam may read it, but not decide it, nor mint a link or webhook that would.
    assert call(server, "GET", f"/approvals/{approval_id}", sam).status_code == 200
    refused = call(server, "POST", f"/approvals/{approval_id}/decide", sam, json={"decision": "approved"})
    assert_error(refused, 403, "not_assigned")
    assert "assigned to rita" in refused.json()["error"]["message"]
    assert_error(call(server, "POST", f"/approvals/{approval_id}/links", sam, json={}), 403, "not_assigned")
    assert_error(call(server, "POST", f"/waits/{approval_id}/webhooks", sam, json={}), 403, "not_assigned")
    # Not even the owner: the assignment names who decides.
    owner = call(
        server, "POST", f"/approvals/{approval_id}/decide", server.headers(), json={"decision": "rejected"}
    )
    assert_error(owner, 403, "not_assigned")
    assert get(server, approval_id)["status"] == "pending"
    trail = call(server, "GET", "/audit", server.headers(), params={"target": approval_id}).json()["items"]
    denied = [(e["principal"], e["outcome"], e["detail"]) for e in trail if e["action"] == "approval.decide"]
    assert ("sam", "refused", "not_assigned") in denied and ("owner", "refused", "not_assigned") in denied

    # Rita's link decides (she was allowed to mint it); so would she.
    link = call(server, "POST", f"/approvals/{approval_id}/links", rita, json={}).json()["url"]
    assert httpx.post(link, data={"decision": "approved"}, timeout=10).status_code == 200
    result = await handle.result(timeout=30)
    assert result["decision"]["status"] == "approved"


async def test_an_approval_assigned_to_a_role(server: ServerProcess, client: Client) -> None:
    admin, rita = token(server, "ada", "administrator"), token(server, "rita", "reviewer")
    trav = await client.submit("nobody.skill", {})
    approval = await client.request_approval(
        trav.id, "Rotate the keys?", operation_key="k", assign_to={"roles": ["administrator"]}
    )
    assert_error(
        call(server, "POST", f"/approvals/{approval['id']}/decide", rita, json={"decision": "approved"}),
        403,
        "not_assigned",
    )
    ok = call(server, "POST", f"/approvals/{approval['id']}/decide", admin, json={"decision": "approved"})
    assert ok.status_code == 200 and ok.json()["decided_by"] == "ada"
    # Bad assignments are refused and create nothing.
    for body in (
        {"assign_to": {"roles": ["worker"]}},
        {"assign_to": {"roles": []}},
        {"assign_to": ["rita"]},
        {"assign_to": {"principals": [""]}},
        {"escalate": {"principals": ["boss"]}, "expires_in_seconds": 5},
        {"escalate": {"principals": ["boss"], "expires_in_seconds": 60}},  # escalates when? no deadline
    ):
        full = {"traverser_id": trav.id, "operation_key": "bad", "prompt": "?", "pause": False, **body}
        assert_error(call(server, "POST", "/approvals", server.headers(), json=full), 422, "validation_error")
    assert [a["operation_key"] for a in await client.list_approvals(status="all", traverser_id=trav.id)] == [
        "k"
    ]


async def test_an_expired_approval_escalates_instead_of_expiring_when_the_handler_asks(
    server: ServerProcess, spawn_worker: Callable[..., WorkerProcess], client: Client
) -> None:
    spawn_worker()
    rita, boss = token(server, "rita", "reviewer"), token(server, "boss", "reviewer")
    handle = await client.submit(
        "tester.assigned",
        {
            "assign_to": {"principals": ["rita"]},
            "escalate": {"principals": ["boss"], "expires_in_seconds": 600},
            "expires_in_seconds": 0.5,
        },
    )
    await reach(client, handle.id, "waiting")
    approval_id = str((await only_approval(client, handle.id))["id"])
    waiting = get(server, approval_id)
    # It escalates at its first deadline, and expires 600 s after its escalation.
    first_deadline = waiting["assignment"]["escalates_at"]
    assert first_deadline < waiting["created_at"] + 5
    assert waiting["expires_at"] == pytest.approx(first_deadline + 600)
    wait_until(lambda: get(server, approval_id)["assignment"]["escalations"] == 1, 20, "it never escalated")
    escalated = get(server, approval_id)
    assert escalated["status"] == "pending" and escalated["expires_at"] >= first_deadline + 600
    assert escalated["assignment"]["principals"] == ["boss"] and escalated["assignment"]["escalate"] is None
    assert escalated["assignment"]["escalates_at"] is None
    assert (await client.get(handle.id)).status == "waiting"
    trail = call(server, "GET", "/audit", server.headers(), params={"target": approval_id}).json()["items"]
    assert [e["principal"] for e in trail if e["action"] == "approval.escalate"] == ["system:escalation"]
    assert_error(
        call(server, "POST", f"/approvals/{approval_id}/decide", rita, json={"decision": "approved"}),
        403,
        "not_assigned",
    )
    ok = call(server, "POST", f"/approvals/{approval_id}/decide", boss, json={"decision": "approved"})
    assert ok.status_code == 200, ok.text
    result = await handle.result(timeout=30)
    assert (result["decision"]["status"], result["decision"]["decided_by"]) == ("approved", "boss")
