"""The decision link page in real headless Chromium (Debian's ``chromium``, driven by
Playwright), against a real graph server and a worker subprocess running the spec's refunds
agent: a reviewer without a token opens the link, approves, the traverser succeeds, and the link
then says it was used.

Screenshots land in test-artifacts/console/ (gitignored); docs/img/link-*.png are copies."""

from __future__ import annotations

from collections.abc import AsyncIterator, Callable
from pathlib import Path

import httpx
import pytest
from atfg_harness import REPO, ServerProcess, WorkerProcess
from atfg_waits import only_approval, reach
from playwright.async_api import Browser, Page, async_playwright, expect

from atfgraph import Client

pytestmark = pytest.mark.browser

CHROMIUM = Path("/usr/bin/chromium")
ARGS = [
    "--no-sandbox",
    "--disable-gpu",
    "--disable-background-networking",
    "--disable-sync",
    "--no-first-run",
]
ARTIFACTS = REPO / "test-artifacts" / "console"
AGENT = "examples.python.features.approvals.agent:app"
CSP = "default-src 'self'; frame-ancestors 'none'; base-uri 'none'; form-action 'self'"


@pytest.fixture
async def browser() -> AsyncIterator[Browser]:
    if not CHROMIUM.exists():
        pytest.fail("Debian's chromium is missing: apt-get install -y chromium", pytrace=False)
    async with async_playwright() as pw:
        launched = await pw.chromium.launch(executable_path=str(CHROMIUM), args=ARGS)
        yield launched
        await launched.close()


async def shot(page: Page, name: str) -> None:
    ARTIFACTS.mkdir(parents=True, exist_ok=True)
    await page.screenshot(path=str(ARTIFACTS / f"{name}.png"), full_page=True)


async def test_a_decision_link_approves_once_in_the_browser_and_then_says_it_was_used(
    server: ServerProcess, spawn_worker: Callable[..., WorkerProcess], client: Client, browser: Browser
) -> None:
    spawn_worker(AGENT)
    handle = await client.submit(
        "refunds.request_refund", {"ticket": "QF-4417", "amount_aud": 480.0, "reason": "cancelled leg"}
    )
    await reach(client, handle.id, "waiting")
    approval = await only_approval(client, handle.id)
    minted = await client.create_decision_link(str(approval["id"]), label="duty manager")
    url, link_id = minted["url"], minted["link"]["id"]

    # A fresh browser: no cookies, no token. The link alone opens the page.
    context = await browser.new_context(viewport={"width": 900, "height": 760})
    page = await context.new_page()
    response = await page.goto(url)
    assert response is not None and response.status == 200
    assert response.headers["content-security-policy"] == CSP
    assert response.headers["referrer-policy"] == "no-referrer"
    await expect(page.get_by_role("heading", name="Decision requested")).to_be_visible()
    await expect(page.locator("pre.prompt")).to_contain_text("QF-4417")
    assert await page.locator("nav").count() == 0  # nothing of the console beyond this one approval
    await shot(page, "link-page")

    await page.locator("textarea[name=response]").fill("approved by phone with the customer")
    async with page.expect_navigation() as nav:
        await page.get_by_role("button", name="Approve").click()
    done = await nav.value
    assert done is not None and done.status == 200
    await expect(page.get_by_role("status")).to_contain_text("Thank you: approved")
    await expect(page.get_by_role("button", name="Approve")).to_have_count(0)
    await shot(page, "link-done")

    result = await handle.result(timeout=30)
    assert result is not None
    decided = await client.get_approval(str(approval["id"]))
    assert (decided["status"], decided["decided_by"]) == ("approved", f"link:{link_id}")
    assert decided["response"] == {"note": "approved by phone with the customer"}

    # Opened again (a second click in the mail, a forwarded copy): it says it was used.
    again = await page.goto(url)
    assert again is not None and again.status == 410
    await expect(page.get_by_role("status")).to_have_text("This link was already used (approved).")
    await expect(page.get_by_role("button", name="Approve")).to_have_count(0)
    await shot(page, "link-used")
    await context.close()

    # A bad link is a plain 404 page, the same for a wrong secret as for garbage.
    assert httpx.get(url[:-3] + "xyz", timeout=10).status_code == 404


async def test_the_dead_letter_list_in_the_console(tmp_path: Path, browser: Browser) -> None:
    from atfg_harness import free_port, wait_until

    dead_endpoint = f"http://127.0.0.1:{free_port()}/notify"  # nobody listens there
    server = ServerProcess(tmp_path)
    server.env.update(
        ATFGRAPH_NOTIFY=dead_endpoint,
        ATFGRAPH_NOTIFY_MAX_ATTEMPTS="2",
        ATFGRAPH_NOTIFY_BACKOFF_SECONDS="0.1",
        ATFGRAPH_NOTIFY_POLL_SECONDS="0.05",
    )
    server.start()
    try:
        headers = server.headers()
        trav = httpx.post(
            server.url + "/api/v2/traversers", json={"target": "nobody.skill"}, headers=headers
        ).json()
        body = {"traverser_id": trav["id"], "operation_key": "k", "prompt": "ok?", "pause": False}
        httpx.post(server.url + "/api/v2/approvals", json=body, headers=headers).raise_for_status()

        def dead() -> bool:
            r = httpx.get(server.url + "/api/v2/notifications", params={"status": "dead"}, headers=headers)
            return len(r.json()["items"]) == 1

        wait_until(dead, 20, "the delivery never reached the dead-letter list")
        context = await browser.new_context(viewport={"width": 1280, "height": 600})
        page = await context.new_page()
        await page.goto(server.url + "/login")
        await page.locator("input[name=token]").fill(server.token("owner"))
        async with page.expect_navigation():
            await page.get_by_role("button", name="Sign in").click()
        await page.get_by_role("link", name="Notifications").click()
        await expect(page.get_by_role("heading", name="Notifications")).to_be_visible()
        row = page.locator("table.deliveries tbody tr")
        await expect(row).to_have_count(1)
        await expect(row.locator("td").nth(1)).to_have_text(dead_endpoint)
        await expect(row.locator("td.attempts")).to_have_text("2")
        await expect(row.locator("td.last-error")).to_contain_text("ConnectError")
        await shot(page, "notifications-dead")
        await context.close()
    finally:
        server.close()
