"""The console, reviewer-first, in real headless Chromium against a real graph server: what a
reviewer types survives live updates and refusals, a schema form types and checks its fields,
the decision is reachable by keyboard, and axe-core finds nothing on the pages a reviewer uses.
"""

from __future__ import annotations

from collections.abc import Callable
from typing import Any

import httpx
import pytest
from atfg_console import axe_violations, create_token, new_page, shot, sign_in
from atfg_harness import ServerProcess, WorkerProcess
from atfg_waits import reach
from playwright.async_api import Browser, expect

from atfgraph import Client

pytestmark = pytest.mark.browser

HALF_TYPED = "checked the fare rules, still waiting on"

#: An approval's response schema with every kind of field the form generates.
REFUND_FORM: dict[str, Any] = {
    "type": "object",
    "required": ["amount_aud", "reason"],
    "properties": {
        "amount_aud": {"type": "number", "title": "Amount (AUD)"},
        "reason": {"type": "string", "description": "Shown to the customer."},
        "urgent": {"type": "boolean"},
        "channel": {"enum": ["card", "voucher"]},
        "payee": {
            "type": "object",
            "properties": {"name": {"type": "string"}, "account": {"type": "integer"}},
        },
    },
}


async def queued_approval(client: Client, key: str, prompt: Any, **kw: Any) -> tuple[str, dict[str, Any]]:
    """A traverser nobody serves (it stays queued, so its page stays live) with an approval."""
    handle = await client.submit("nobody.home", {"ticket": "QF-9"})
    approval = await client.request_approval(handle.id, prompt, operation_key=key, **kw)
    return handle.id, approval


async def test_a_half_typed_response_survives_live_updates_of_the_run_page(
    server: ServerProcess, client: Client, browser: Browser
) -> None:
    run_id, approval = await queued_approval(client, "first", {"question": "Refund QF-9?"})
    page, dialogs = await new_page(browser)
    assert await sign_in(page, server, create_token(server, "rita", "reviewer")) == 200
    await page.goto(f"{server.url}/runs/{run_id}")
    assert await page.locator("meta[http-equiv=refresh]").count() == 0
    await page.evaluate("window.__sameDocument = true")
    card = page.locator(f"article[data-approval-id='{approval['id']}']")
    box = card.locator("textarea[name=response]")
    await box.click()
    await box.type(HALF_TYPED)

    # The run changes twice while the reviewer types: the timeline shows it without a reload...
    await client.request_approval(run_id, {"question": "second?"}, operation_key="second", pause=False)
    timeline = page.locator("table.timeline")
    await expect(timeline).to_contain_text("second", timeout=15_000)
    # ...and the focused card, with the half-typed text, is left alone (even once focus leaves it).
    await page.locator("h1").click()
    await client.request_approval(run_id, {"question": "third?"}, operation_key="third", pause=False)
    await expect(timeline).to_contain_text("third", timeout=15_000)
    await expect(box).to_have_value(HALF_TYPED)
    assert await page.evaluate("window.__sameDocument") is True  # never a full-page refresh
    # The untouched region (the approvals list) did not show the new ones over the typing.
    await expect(page.locator("article[data-approval-id]")).to_have_count(1)
    await shot(page, "run-live")

    # The reviewer finishes and decides; the run page shows the decision.
    await box.type(" the receipt")
    await card.get_by_role("button", name="Approve").click()
    await expect(page.locator(".flash.ok")).to_contain_text("approved by rita")
    decided = await client.get_approval(approval["id"])
    assert decided["response"] == {"note": HALF_TYPED + " the receipt"}
    assert dialogs == []


async def test_a_schema_form_types_its_fields_and_rejects_a_wrong_type_inline(
    server: ServerProcess, client: Client, browser: Browser
) -> None:
    run_id, approval = await queued_approval(
        client, "refund", "Refund **QF-9** <b>in full</b>?", pause=False, response_schema=REFUND_FORM
    )
    assert approval["response_schema"] == REFUND_FORM
    page, _ = await new_page(browser)
    assert await sign_in(page, server, create_token(server, "rita", "reviewer")) == 200
    await page.goto(server.url + "/inbox?kind=approval")
    card = page.locator(f"article[data-approval-id='{approval['id']}']")
    # A string prompt is the question, its Markdown rendered and its HTML shown as typed.
    await expect(card.locator(".question")).to_have_text("Refund QF-9 <b>in full</b>?")
    await expect(card.locator(".question strong")).to_have_text("QF-9")
    assert await card.locator(".question b").count() == 0

    # A number field holding words: refused beside the field, everything typed kept.
    await card.get_by_label("Amount (AUD)").fill("lots")
    await card.get_by_label("reason").fill("delayed 6 h")
    await card.get_by_label("urgent").select_option("true")
    await card.get_by_label("channel").select_option(label="voucher")
    await card.get_by_label("name").fill("A. Traveller")
    await card.get_by_role("button", name="Approve").click()
    amount = card.locator(".field[data-field='f.amount_aud']")
    await expect(amount.locator(".field-error")).to_have_text("'lots' is not a number")
    await expect(card.get_by_label("Amount (AUD)")).to_have_value("lots")
    await expect(card.get_by_label("Amount (AUD)")).to_have_attribute("aria-invalid", "true")
    await expect(card.get_by_label("reason")).to_have_value("delayed 6 h")
    await expect(card.get_by_label("urgent")).to_have_value("true")
    await expect(card.get_by_label("channel")).to_have_value('"voucher"')
    await expect(card.get_by_label("name")).to_have_value("A. Traveller")
    await shot(page, "schema-form-refused")

    # A required field left empty: the server's schema check names it, beside that field.
    await card.get_by_label("Amount (AUD)").fill("120.5")
    await card.get_by_label("reason").fill("")
    await card.get_by_role("button", name="Approve").click()
    reason = card.locator(".field[data-field='f.reason']")
    await expect(reason.locator(".field-error")).to_contain_text("'reason' is a required property")
    await expect(card.get_by_label("Amount (AUD)")).to_have_value("120.5")
    assert (await client.get_approval(approval["id"]))["status"] == "pending"

    # A nested integer that is not whole.
    await card.get_by_label("reason").fill("delayed 6 h")
    await card.get_by_label("account").fill("12.5")
    await card.get_by_role("button", name="Approve").click()
    account = card.locator(".field[data-field='f.payee.account']")
    await expect(account.locator(".field-error")).to_have_text("'12.5' is not a whole number")
    await card.get_by_label("account").fill("4417")
    await card.get_by_role("button", name="Approve").click()
    await expect(page.locator(".flash.ok")).to_contain_text("approved by rita")
    decided = await client.get_approval(approval["id"])
    assert decided["response"] == {
        "amount_aud": 120.5,
        "reason": "delayed 6 h",
        "urgent": True,
        "channel": "voucher",
        "payee": {"name": "A. Traveller", "account": 4417},
    }
    assert (await client.get(run_id)).status == "queued"  # still queued: nobody serves its node


async def test_the_api_checks_an_approval_response_against_its_schema(
    server: ServerProcess, client: Client
) -> None:
    handle = await client.submit("nobody.home", {})
    with httpx.Client(base_url=server.url + "/api/v2", headers=server.headers(), timeout=10) as http:
        r = http.post(
            "/approvals",
            json={
                "traverser_id": handle.id,
                "operation_key": "bad",
                "prompt": "?",
                "pause": False,
                "response_schema": {"type": "nonsense"},
            },
        )
        assert r.status_code == 422 and "not a valid JSON Schema" in r.json()["error"]["message"], r.text
        r = http.post(
            "/approvals",
            json={"traverser_id": handle.id, "operation_key": "bad", "prompt": "?", "pause": False,
                  "response_schema": [1]},
        )  # fmt: skip
        assert r.status_code == 422 and r.json()["error"]["code"] == "validation_error"
        approval = await client.request_approval(
            handle.id, "Refund?", operation_key="ok", response_schema=REFUND_FORM
        )
        url = f"/approvals/{approval['id']}/decide"
        r = http.post(url, json={"decision": "approved", "response": {"amount_aud": "x", "reason": "r"}})
        assert r.status_code == 422, r.text
        assert r.json()["error"]["code"] == "response_invalid"
        assert "at amount_aud" in r.json()["error"]["message"]
        r = http.post(url, json={"decision": "approved"})
        assert r.status_code == 422 and "at (root)" in r.json()["error"]["message"]
        assert http.get(url.removesuffix("/decide")).json()["status"] == "pending"
        # The inbox and the listing show the schema; a rejection's response is free.
        inbox = http.get("/inbox").json()["items"]
        assert [i["response_schema"] for i in inbox if i["id"] == approval["id"]] == [REFUND_FORM]
        r = http.post(url, json={"decision": "rejected", "response": {"note": "no"}})
        assert r.status_code == 200 and r.json()["response_schema"] == REFUND_FORM
        assert r.json()["status"] == "rejected"


async def test_keyboard_reaches_and_labels_approve_and_reject_and_axe_finds_nothing(
    server: ServerProcess, client: Client, browser: Browser
) -> None:
    run_id, approval = await queued_approval(
        client, "kbd", {"title": "Approve the QF-9 refund", "amount": 480}, pause=False
    )
    page, _ = await new_page(browser)
    await page.goto(server.url + "/login")
    assert await axe_violations(page) == []
    assert await sign_in(page, server, create_token(server, "rita", "reviewer")) == 200
    await page.goto(server.url + "/inbox")
    assert await axe_violations(page) == []

    # Tab from the top of the page to the response box, then to Approve: each is labelled.
    card = page.locator(f"article[data-approval-id='{approval['id']}']")
    response = card.locator("textarea[name=response]")
    for _ in range(60):
        await page.keyboard.press("Tab")
        if await response.evaluate("el => el === document.activeElement"):
            break
    else:
        raise AssertionError("Tab never reached the response box")
    assert (
        await response.evaluate("el => el.labels[0].textContent.trim()")
        == "Response (a note, or a JSON object)"
    )
    await page.keyboard.type("fine")
    await page.keyboard.press("Tab")
    approve = card.get_by_role("button", name="Approve")
    assert await approve.evaluate("el => el === document.activeElement")
    await page.keyboard.press("Tab")
    assert await card.get_by_role("button", name="Reject").evaluate("el => el === document.activeElement")
    await page.keyboard.press("Shift+Tab")
    await page.keyboard.press("Enter")
    await expect(page.locator(".flash.ok")).to_contain_text("approved by rita")
    assert (await client.get_approval(approval["id"]))["response"] == {"note": "fine"}

    await page.goto(f"{server.url}/runs/{run_id}")
    assert await axe_violations(page) == []
    await page.goto(server.url + "/runs")
    assert await axe_violations(page) == []


async def test_dark_mode_and_a_390px_screen_keep_the_inbox_usable(
    server: ServerProcess, client: Client, browser: Browser
) -> None:
    await queued_approval(client, "small", {"question": "Refund QF-9 on a phone?"}, pause=False)
    page, _ = await new_page(browser, (390, 844))
    await page.emulate_media(color_scheme="dark")
    assert await sign_in(page, server, create_token(server, "rita", "reviewer")) == 200
    await page.goto(server.url + "/inbox")
    width = await page.evaluate("document.documentElement.scrollWidth")
    assert width <= 390, f"the page is {width} px wide on a 390 px screen"
    header = await page.locator("header.top").bounding_box()
    assert header is not None and header["width"] <= 390
    background = await page.evaluate("getComputedStyle(document.body).backgroundColor")
    assert background == "rgb(15, 20, 27)", background
    assert await axe_violations(page) == []
    await shot(page, "inbox-dark-390")


async def test_a_failed_run_is_retried_from_its_checkpoint_after_confirmation_and_the_api_agrees(
    server: ServerProcess, spawn_worker: Callable[..., WorkerProcess], client: Client, browser: Browser
) -> None:
    spawn_worker()
    handle = await client.submit("tester.fails_until_retried", {})
    await reach(client, handle.id, "failed")
    queued = await client.submit("nobody.home", {})
    owner = server.token("owner")
    page, dialogs = await new_page(browser)
    assert await sign_in(page, server, owner) == 200

    # Retry asks first (on the page, no script needed); "No" changes nothing.
    await page.goto(f"{server.url}/runs/{handle.id}")
    await expect(page.locator("#run-status")).to_have_text("failed")
    await page.get_by_role("button", name="Retry…").click()
    confirm = page.get_by_role("alertdialog")
    await expect(confirm).to_contain_text("A new attempt starts from its checkpoints")
    await shot(page, "run-retry-confirm")
    await confirm.get_by_role("link", name="No, keep it as it is").click()
    assert (await client.get(handle.id)).status == "failed"
    await page.get_by_role("button", name="Retry…").click()
    await page.get_by_role("button", name="Yes, retry the run").click()
    await expect(page.locator(".flash.ok")).to_contain_text("queued again by owner")
    result = await handle.result(timeout=30)
    assert result == {"seen": {"failed_on": 1}, "attempt": 2}
    await expect(page.locator("#run-status")).to_have_text("succeeded", timeout=15_000)  # live
    await expect(page.locator("table.timeline td.duration").nth(1)).to_contain_text("+")

    # Cancel, confirmed the same way, on a run still in progress.
    await page.goto(f"{server.url}/runs/{queued.id}")
    await page.get_by_role("button", name="Cancel run…").click()
    await page.get_by_role("button", name="Yes, cancel the run").click()
    await expect(page.locator(".flash.ok")).to_contain_text("cancelled by owner")
    assert (await client.get(queued.id)).status == "cancelled"
    assert dialogs == []

    # The API's route: only a failed traverser is retried; a reviewer may not; bad ids are 404.
    with httpx.Client(base_url=server.url + "/api/v2", timeout=10) as http:
        owner_h = {"Authorization": f"Bearer {owner}"}
        r = http.post(f"/runs/{handle.id}/retry", headers=owner_h)
        assert (r.status_code, r.json()["error"]["code"]) == (409, "invalid_state"), r.text
        r = http.post("/runs/nope/retry", headers=owner_h)
        assert r.status_code == 404, r.text
        reviewer = {"Authorization": f"Bearer {create_token(server, 'rita', 'reviewer')}"}
        assert http.post(f"/runs/{handle.id}/retry", headers=reviewer).status_code == 403
    # A reviewer sees no cancel or retry button.
    page, _ = await new_page(browser)
    assert await sign_in(page, server, create_token(server, "rex", "reviewer")) == 200
    await page.goto(f"{server.url}/runs/{handle.id}")
    await expect(page.locator(".run-actions")).to_have_count(0)


async def test_a_handler_pauses_on_an_approval_with_a_response_schema_and_gets_the_typed_answer(
    server: ServerProcess, spawn_worker: Callable[..., WorkerProcess], client: Client
) -> None:
    spawn_worker()
    handle = await client.submit("tester.typed_review", {"ticket": "QF-1"})
    await reach(client, handle.id, "waiting")
    [approval] = await client.list_approvals(traverser_id=handle.id)
    assert approval["response_schema"]["required"] == ["amount_aud"]
    with httpx.Client(base_url=server.url + "/api/v2", headers=server.headers(), timeout=10) as http:
        url = f"/approvals/{approval['id']}/decide"
        r = http.post(url, json={"decision": "approved", "response": {"amount_aud": "all"}})
        assert (r.status_code, r.json()["error"]["code"]) == (422, "response_invalid"), r.text
        assert (await client.get(handle.id)).status == "waiting"
        r = http.post(url, json={"decision": "approved", "response": {"amount_aud": 480}})
        assert r.status_code == 200, r.text
    assert await handle.result(timeout=30) == {"status": "approved", "response": {"amount_aud": 480}}
