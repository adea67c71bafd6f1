"""Starting a run from the console's Runs page, in real headless Chromium against a real graph
server: a refused form keeps what was typed and says why beside the field; a start lands on the
new run's page (saying when no worker serves its node yet) and is audited; a reviewer, who may
not submit, gets no form and a POST of it is refused, changing nothing."""

from __future__ import annotations

import httpx
import pytest
from atfg_console import audit, axe_violations, create_token, new_page, shot, sign_in
from atfg_harness import ServerProcess
from playwright.async_api import Browser, expect

pytestmark = pytest.mark.browser


def traversers(server: ServerProcess) -> list[dict[str, object]]:
    with httpx.Client(base_url=server.url + "/api/v2", headers=server.headers(), timeout=30) as http:
        items: list[dict[str, object]] = http.get("/traversers", params={"status": "queued"}).json()["items"]
        return items


async def test_a_run_is_started_from_the_runs_page_and_a_refusal_keeps_the_typing(
    server: ServerProcess, browser: Browser
) -> None:
    page, dialogs = await new_page(browser)
    assert await sign_in(page, server, create_token(server, "sam", "administrator")) == 200
    await page.goto(server.url + "/runs")
    await page.get_by_text("Start a run").click()
    form = page.get_by_role("form", name="Start a run")
    target, inputs = form.get_by_label("Target (node.skill)"), form.get_by_label("Input", exact=False)

    # Not a JSON object: 422, the page again with the typed text and the reason beside it.
    half_typed = '{"ticket": "QF-1042", "amount_aud": '
    await target.fill("refunds.request_refund")
    await inputs.fill(half_typed)
    async with page.expect_navigation() as nav:
        await form.get_by_role("button", name="Start").click()
    assert (await nav.value).status == 422  # type: ignore[union-attr]
    await expect(inputs).to_have_value(half_typed)
    await expect(target).to_have_value("refunds.request_refund")
    await expect(page.locator("#start-input-error")).to_contain_text("not JSON")
    await expect(inputs).to_have_attribute("aria-invalid", "true")
    # A target that is not node.skill, and an array for input: both said, nothing started.
    await target.fill("refunds")
    await inputs.fill("[1, 2]")
    async with page.expect_navigation():
        await form.get_by_role("button", name="Start").click()
    await expect(page.locator("#start-target-error")).to_contain_text("node.skill")
    await expect(page.locator("#start-input-error")).to_contain_text("JSON object")
    assert traversers(server) == []
    violations = await axe_violations(page)
    assert violations == [], violations
    await shot(page, "console-start-refused", around=page.locator("details.start"), height=700)

    # Fixed: started, on its own page, told that no worker serves the node yet.
    await target.fill("refunds.request_refund")
    await inputs.fill('{"ticket": "QF-1042", "amount_aud": 480.0}')
    await form.get_by_label("Attempts").fill("2")
    async with page.expect_navigation():
        await form.get_by_role("button", name="Start").click()
    [run] = traversers(server)
    assert page.url.endswith(f"/runs/{run['id']}")
    assert run["target"] == "refunds.request_refund" and run["max_attempts"] == 2
    await expect(page.locator(".flash.ok")).to_contain_text("No worker has registered node 'refunds'")
    await expect(page.locator("pre.json").first).to_contain_text("QF-1042")
    submitted = [e for e in audit(server, run["id"]) if e["action"] == "traverser.submit"]
    assert [e["principal"] for e in submitted] == ["sam"], submitted
    assert dialogs == []


async def test_a_reviewer_gets_no_start_form_and_its_post_is_refused(
    server: ServerProcess, browser: Browser
) -> None:
    token = create_token(server, "rita", "reviewer")
    page, _ = await new_page(browser)
    assert await sign_in(page, server, token) == 200
    await page.goto(server.url + "/runs")
    await expect(page.locator("h1")).to_contain_text("Runs")
    assert await page.get_by_text("Start a run").count() == 0
    with httpx.Client(base_url=server.url, timeout=30) as http:
        r = http.post(
            "/runs",
            data={"target": "refunds.request_refund", "input": "{}"},
            headers={"authorization": f"Bearer {token}"},
        )
    assert r.status_code == 403, r.text
    assert traversers(server) == []
