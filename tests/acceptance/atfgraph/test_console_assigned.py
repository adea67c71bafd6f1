"""An approval assigned to named reviewers is read-only in the console for everyone else: the
card says to whom it is assigned and offers no Approve/Reject (the decision would be refused with
403 ``not_assigned`` anyway), on the inbox and on the run page; the assignee gets the form. In
real Chromium against a real server and worker."""

from __future__ import annotations

from collections.abc import Callable

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
