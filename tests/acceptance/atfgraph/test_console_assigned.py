"""An approval assigned to named reviewers is read-only in the console for everyone else: the
card says to whom it is assigned and offers no Approve/Reject (the decision would be refused with
403 ``not_assigned`` anyway), on the inbox and on the run page; the assignee gets the form. In
real Chromium against a real server and worker."""

from __future__ import annotations

from collections.abc import Callable
from datetime import UTC, datetime

import pytest
from atfg_console import axe_violations, create_token, new_page, sign_in
from atfg_harness import ServerProcess, WorkerProcess
from atfg_waits import only_approval, reach
from playwright.async_api import Browser, expect

from atfgraph import Client


async def test_an_approval_assigned_to_others_is_read_only_for_a_reviewer(
    server: ServerProcess, spawn_worker: Callable[..., WorkerProcess], client: Client, browser: Browser
) -> None:
    spawn_worker()
    handle = await client.submit("tester.assigned", {"assign_to": {"principals": ["rita"]}})
    await reach(client, handle.id, "waiting")
    approval_id = str((await only_approval(client, handle.id))["id"])
    rita, sam = create_token(server, "rita", "reviewer"), create_token(server, "sam", "reviewer")

    page, dialogs = await new_page(browser)
    assert await sign_in(page, server, sam) == 200
    for url in ("/inbox", f"/runs/{handle.id}"):
        await page.goto(server.url + url)
        card = page.locator(f"article[data-approval-id='{approval_id}']")
        await expect(card.locator(".assigned")).to_have_text("Assigned to rita.")
        await expect(card.locator(".read-only")).to_contain_text("assigned to others")
        await expect(card.get_by_role("button", name="Approve")).to_have_count(0)
        await expect(card.locator("form.decide")).to_have_count(0)
    assert await axe_violations(page) == []

    page, _ = await new_page(browser)
    assert await sign_in(page, server, rita) == 200
    await page.goto(server.url + "/inbox")
    card = page.locator(f"article[data-approval-id='{approval_id}']")
    await expect(card.locator(".assigned")).to_have_text("Assigned to rita.")
    await expect(card.locator(".read-only")).to_have_count(0)
    await card.get_by_role("button", name="Approve").click()
    await expect(page.locator(".flash.ok")).to_be_visible()
    result = await handle.result(timeout=30)
    assert result["decision"]["status"] == "approved"
    assert dialogs == []


async def test_an_approval_that_escalates_says_when_and_to_whom(
    server: ServerProcess, spawn_worker: Callable[..., WorkerProcess], client: Client, browser: Browser
) -> None:
    spawn_worker()
    handle = await client.submit(
        "tester.assigned",
        {
            "assign_to": {"principals": ["rita"]},
            "escalate": {"roles": ["administrator"], "principals": ["boss"], "expires_in_seconds": 3600},
            "expires_in_seconds": 7200,
        },
    )
    await reach(client, handle.id, "waiting")
    approval_id = str((await only_approval(client, handle.id))["id"])
    shown = await client.get_approval(approval_id)
    escalates_at, expires_at = shown["assignment"]["escalates_at"], shown["expires_at"]
    assert expires_at == pytest.approx(escalates_at + 3600)  # an hour after it escalates
    page, dialogs = await new_page(browser)
    assert await sign_in(page, server, create_token(server, "rita", "reviewer")) == 200
    for url in ("/inbox", f"/runs/{handle.id}"):
        await page.goto(server.url + url)
        card = page.locator(f"article[data-approval-id='{approval_id}']")
        line = card.locator(".assigned")
        await expect(line).to_contain_text("Assigned to rita. Escalates to role administrator, boss")
        await expect(line).to_contain_text("if nobody decides.")
        await expect(line.locator("time")).to_have_attribute("datetime", console_iso(escalates_at))
        await expect(line).to_contain_text("(in 1 h)")  # two hours from now, less the time it took
        expires = card.locator("dt:text('Expires') + dd time")
        await expect(expires).to_have_attribute("datetime", console_iso(expires_at))
    assert await axe_violations(page) == [] and dialogs == []


def console_iso(seconds: float) -> str:
    """An instant as the console's ``<time datetime>`` gives it."""
    return datetime.fromtimestamp(seconds, UTC).isoformat()
