"""The review console in real headless Chromium (Debian's ``chromium``, driven by Playwright),
against a real graph server and a worker subprocess running the spec's refunds agent.

Screenshots land in test-artifacts/console/ (gitignored); docs/img/console-*.png are copies."""

from __future__ import annotations

import re
from collections.abc import Callable
from typing import Any

import pytest
from atfg_console import audit, create_token, in_order, new_page, shot, sign_in
from atfg_harness import ServerProcess, WorkerProcess, wait_until
from atfg_waits import only_approval, reach
from playwright.async_api import Browser, expect

import pyworkflow
from atfgraph import Client
from pyworkflow import step, step_hook, workflow

pytestmark = pytest.mark.browser

AGENT = "examples.python.features.approvals.agent:app"
CSP = "default-src 'self'; frame-ancestors 'none'; base-uri 'none'; form-action 'self'"
NOTE = "verified against the disruption log"


async def test_reviewer_signs_in_sees_the_refund_approves_it_and_the_traverser_succeeds(
    server: ServerProcess, spawn_worker: Callable[..., WorkerProcess], client: Client, browser: Browser
) -> None:
    spawn_worker(AGENT)
    handle = await client.submit(
        "refunds.request_refund", {"ticket": "QF-4417", "amount_aud": 480.0, "reason": "cancelled leg"}
    )
    await reach(client, handle.id, "waiting")
    approval = await only_approval(client, handle.id)
    reviewer = create_token(server, "rita", "reviewer")
    page, dialogs = await new_page(browser)

    # Unauthenticated: redirected to the sign-in page, which carries the CSP like every page.
    response = await page.goto(server.url + "/")
    assert response is not None and page.url == server.url + "/login"
    assert response.headers["content-security-policy"] == CSP
    assert await sign_in(page, server, reviewer) == 200
    assert page.url == server.url + "/"
    session = next(c for c in await page.context.cookies() if c["name"] == "atfg_console")
    assert (session["httpOnly"], session["sameSite"], session["path"]) == (True, "Strict", "/")

    # The inbox: the pending refund led by its question, then its traverser, node, key, the rest
    # of the prompt and the checkpoint.
    card = page.locator(f"article[data-approval-id='{approval['id']}']")
    await expect(card).to_contain_text(handle.id)
    await expect(card).to_contain_text("refunds.request_refund")
    await expect(card.locator(".operation-key")).to_have_text("refund:QF-4417")
    await expect(card.locator(".question")).to_have_text("Refund 480.0 AUD on QF-4417 (BNE-SYD)?")
    await expect(card.locator(".prompt")).not_to_contain_text('"question"')
    await expect(card.locator(".checkpoint")).to_contain_text('"prepared_on_attempt": 1')
    await expect(card.locator(".checkpoint")).to_contain_text('"route": "BNE-SYD"')
    await shot(page, "policies")

    await card.locator("textarea[name=response]").fill(NOTE)
    await card.get_by_role("button", name="Approve").click()
    await expect(page.locator(".flash.ok")).to_contain_text(f"Approval {approval['id']} approved by rita")
    await expect(page.locator(f"article[data-approval-id='{approval['id']}']")).to_have_count(0)
    decided = page.locator(f"table.decided tr[data-approval-id='{approval['id']}']")
    await expect(decided.locator(".decided-by")).to_have_text("rita")
    await shot(page, "policies-decided")

    # The decision went through the API's transition: the traverser continued and succeeded.
    result = await handle.result(timeout=30)
    assert result["status"] == "approved" and result["decided_by"] == "rita"
    assert result["response"] == {"note": NOTE}
    assert (result["attempts"], result["prepared_on_attempt"]) == (2, 1)
    entries = audit(server, approval["id"])
    assert any(
        (e["principal"], e["action"], e["outcome"]) == ("rita", "approval.decide", "allowed") for e in entries
    ), entries

    # Run detail: succeeded, the path with its one refunds.assess step, the checkpoint, the note.
    await page.locator(f"a[href='/runs/{handle.id}']").first.click()
    await expect(page.locator("#run-status")).to_have_text("succeeded", timeout=10_000)
    await expect(page.locator("table.steps")).to_contain_text("refunds.assess")
    await expect(page.locator(".approval-decided .response")).to_contain_text(f'"note": "{NOTE}"')
    await expect(page.locator(".approval-decided .decided-by")).to_have_text("rita")
    await expect(page.locator("table.timeline")).to_contain_text("approval approved")
    await expect(page.locator("table.timeline")).to_contain_text("checkpoint saved")
    await shot(page, "run")

    # Runs: the status filter.
    await page.goto(server.url + "/runs?status=succeeded&node=refunds")
    await expect(page.locator(f"tr[data-traverser-id='{handle.id}']")).to_have_count(1)
    for query in ("status=waiting", "node=flights", "since=2999-01-01T00:00", "until=2000-01-01T00:00"):
        await page.goto(f"{server.url}/runs?{query}")
        await expect(page.locator(f"tr[data-traverser-id='{handle.id}']")).to_have_count(0)

    # Workers: the refunds worker's (node, version), capacity and the pause it counted.
    wait_until(
        lambda: (server.workers("refunds")[0]["stats"] or {}).get("succeeded") == 1,
        10,
        "the worker never reported its success",
    )
    await page.goto(server.url + "/workers")
    row = page.locator("table.workers tbody tr").first
    await expect(row).to_contain_text("refunds")
    await expect(row).to_contain_text("1.0.0")
    cells = [c.strip() for c in await row.locator("td").all_inner_texts()]
    assert cells[3:6] == ["2", "0", "1"], cells  # capacity, permits in use, paused
    await shot(page, "workers")

    # Signing out ends the session.
    await page.get_by_role("button", name="Sign out").click()
    await page.goto(server.url + "/")
    assert page.url == server.url + "/login"
    assert dialogs == []


XSS = "<script>window.__xss=1;alert(1)</script><img src=x onerror=window.__xss=2>"


async def test_worker_tokens_forged_forms_and_hostile_prompts_are_refused_or_shown_as_text(
    server: ServerProcess, spawn_worker: Callable[..., WorkerProcess], client: Client, browser: Browser
) -> None:
    spawn_worker(AGENT)
    handle = await client.submit(
        "refunds.request_refund", {"ticket": "NZ-0882", "amount_aud": 480.0, "reason": XSS}
    )
    await reach(client, handle.id, "waiting")
    approval = await only_approval(client, handle.id)
    decide_url = f"{server.url}/approvals/{approval['id']}/decide"

    # A worker-only credential is refused at sign-in with a clear message and gets no session.
    page, dialogs = await new_page(browser)
    assert await sign_in(page, server, server.token("worker")) == 403
    await expect(page.locator("h1")).to_have_text("Sign-in refused")
    await expect(page.locator(".error-message")).to_contain_text("worker-only credential")
    assert [c["name"] for c in await page.context.cookies()] == ["atfg_console_login"]
    await shot(page, "worker-refused")
    nonce = next(c["value"] for c in await page.context.cookies() if c["name"] == "atfg_console_login")

    # Crafted POSTs with what a worker has: its sign-in cookie and nonce, or its bearer token.
    forged = await page.request.post(
        decide_url, form={"decision": "approved", "csrf": nonce}, max_redirects=0
    )
    assert forged.status == 403
    bearer = await page.request.post(
        decide_url,
        form={"decision": "approved", "csrf": nonce},
        headers={"Authorization": f"Bearer {server.token('worker')}"},
        max_redirects=0,
    )
    assert bearer.status == 403
    assert "worker-only credential" in await bearer.text()
    assert bearer.headers["content-security-policy"] == CSP
    assert (await client.get_approval(approval["id"]))["status"] == "pending"
    denied = [e for e in audit(server, approval["id"]) if e["outcome"] == "denied"]
    assert {(e["role"], e["action"]) for e in denied} == {
        ("anonymous", "approval.decide"),
        ("worker", "approval.decide"),
    }

    # A reviewer sees the agent's hostile text as text: nothing ran, no element was injected.
    reviewer = create_token(server, "rita", "reviewer")
    page, dialogs = await new_page(browser)
    assert await sign_in(page, server, reviewer) == 200
    card = page.locator(f"article[data-approval-id='{approval['id']}']")
    await expect(card.locator(".prompt")).to_contain_text(XSS)
    await expect(card.locator(".checkpoint")).to_contain_text(XSS)
    await expect(page.get_by_text(XSS).first).to_be_visible()
    assert await page.evaluate("typeof window.__xss") == "undefined"
    assert await page.locator("main script, main img").count() == 0
    await shot(page, "untrusted-prompt")

    # CSRF: the reviewer's own session without the form's token, or with another one, is refused.
    for form in ({"decision": "approved"}, {"decision": "approved", "csrf": "x" * 43}):
        refused = await page.request.post(decide_url, form=form, max_redirects=0)
        assert refused.status == 403
        assert "CSRF" in await refused.text()
    csrf = await card.locator("input[name=csrf]").get_attribute("value")
    assert csrf and re.fullmatch(r"[A-Za-z0-9_-]{43}", csrf)
    assert (await client.get_approval(approval["id"]))["status"] == "pending"

    # The form with its token decides (rejected here), and the rejection resumes the handler.
    await card.locator("textarea[name=response]").fill('{"reason": "<b>not eligible</b>"}')
    await card.get_by_role("button", name="Reject").click()
    await expect(page.locator(".flash.ok")).to_contain_text("rejected by rita")
    result = await handle.result(timeout=30)
    assert result["status"] == "rejected" and result["response"] == {"reason": "<b>not eligible</b>"}
    assert dialogs == []


@step
async def console_review_step(doc: str) -> dict[str, Any]:
    answer = await step_hook(
        "console_review",
        payload_schema={
            "type": "object",
            "required": ["approved"],
            "properties": {"approved": {"type": "boolean"}},
        },
    )
    return {"doc": doc, "answer": answer}


@workflow
async def console_reviewed(doc: str) -> dict[str, Any]:
    return await console_review_step(doc)


async def test_a_pyworkflow_step_hook_in_the_same_database_is_resumed_from_the_inbox(
    server: ServerProcess, browser: Browser
) -> None:
    # pyworkflow's local runtime runs in this test's event loop, on the server's database file.
    pyworkflow.configure(storage=server.storage_url, poll_interval=0.05)
    try:
        run_id = await pyworkflow.start(console_reviewed, "release notes")
        await pyworkflow.wait_for_run(run_id, timeout=15, until=("suspended",))
        reviewer = create_token(server, "rita", "reviewer")
        page, _ = await new_page(browser)
        assert await sign_in(page, server, reviewer) == 200
        await page.goto(server.url + "/inbox")
        card = page.locator("article.hook", has_text=run_id)
        await expect(card.locator(".hook-name")).to_have_text("console_review")
        await expect(card).to_contain_text("step_hook")
        await shot(page, "inbox")

        # The hook's schema is a form (a yes/no field for the boolean) with a raw JSON fallback.
        await expect(card.get_by_label("approved")).to_have_count(1)
        raw = card.locator("textarea[name=payload]")
        await card.get_by_text("Answer as raw JSON instead").click()
        # The schema is enforced: a wrong payload changes nothing, and the page comes back with
        # the text as typed and the reason beside the field it concerns.
        await raw.fill('{"approved": "yes"}')
        await card.get_by_role("button", name="Resume").click()
        field = card.locator(".field[data-field='f.approved']")
        await expect(field.locator(".field-error")).to_contain_text("schema at approved")
        await expect(raw).to_have_value('{"approved": "yes"}')
        await raw.fill("{not json")
        await card.get_by_role("button", name="Resume").click()
        await expect(card.locator(".field[data-field=payload] .field-error")).to_contain_text(
            "not valid JSON"
        )
        await expect(raw).to_have_value("{not json")
        assert (await pyworkflow.get_workflow_run(run_id)).status == "suspended"

        await raw.fill('{"approved": true, "by": "console"}')
        await card.get_by_role("button", name="Resume").click()
        await expect(page.locator(".flash.ok")).to_contain_text("resumed by rita")
        await expect(page.locator("article.hook", has_text=run_id)).to_have_count(0)
        run = await pyworkflow.wait_for_run(run_id, timeout=15)
        assert run.status == "completed", run.error
        assert run.result == {"doc": "release notes", "answer": {"approved": True, "by": "console"}}
    finally:
        await pyworkflow.shutdown()
        pyworkflow.configure()


@step
async def console_outline(doc: str) -> str:
    return f"outline of {doc}"


@step
async def console_checkpointed_review(doc: str, outline: str) -> dict[str, Any]:
    await pyworkflow.save_step_checkpoint({"outlined": doc})  # kept while the step waits
    answer = await step_hook(
        "console_review",
        payload_schema={
            "type": "object",
            "required": ["approved"],
            "properties": {"approved": {"type": "boolean"}},
        },
    )
    return {"doc": outline, "answer": answer}


@workflow
async def console_drafted(doc: str) -> dict[str, Any]:
    outline = await console_outline(doc)
    return await console_checkpointed_review(doc, outline)


async def test_the_runs_page_lists_pyworkflow_runs_beside_traversers_and_shows_one(
    server: ServerProcess, client: Client, browser: Browser
) -> None:
    handle = await client.submit("nobody.skill", {"q": 1})  # no worker: it stays queued
    pyworkflow.configure(storage=server.storage_url, poll_interval=0.05)
    try:
        run_id = await pyworkflow.start(console_drafted, "<b>release notes</b>")
        await pyworkflow.wait_for_run(run_id, timeout=15, until=("suspended",))
        reviewer = create_token(server, "rita", "reviewer")
        page, dialogs = await new_page(browser)
        assert await sign_in(page, server, reviewer) == 200

        # Both kinds, newest first, each with its own status vocabulary.
        await page.goto(server.url + "/runs")
        rows = page.locator("table.runs tbody tr")
        await expect(rows).to_have_count(2)
        assert await rows.nth(0).get_attribute("data-run-id") == run_id
        await expect(rows.nth(0)).to_contain_text("workflow")
        await expect(rows.nth(0).locator(".status")).to_have_text("suspended")
        await expect(page.locator(f"tr[data-traverser-id='{handle.id}'] .status")).to_have_text("queued")
        await expect(page.locator("input[name=kind][value=all]")).to_be_checked()
        await shot(page, "runs-kinds")

        # The kind filter: workflows only, traversers only, back to all.
        await page.get_by_label("workflows").check()
        await page.get_by_role("button", name="Filter").click()
        await expect(page.locator("input[name=kind][value=workflow]")).to_be_checked()
        assert "kind=workflow" in page.url
        await expect(rows).to_have_count(1)
        await expect(page.locator(f"tr[data-run-id='{run_id}']")).to_have_count(1)
        await page.get_by_label("traversers").check()
        await page.get_by_role("button", name="Filter").click()
        await expect(rows).to_have_count(1)
        await expect(page.locator(f"tr[data-traverser-id='{handle.id}']")).to_have_count(1)
        # The status filter takes the engine's name or the API's, for both kinds.
        for query, expected in (
            ("kind=all&status=waiting", run_id),
            ("status=suspended", run_id),
            ("status=pending", handle.id),
            ("status=queued&kind=traverser", handle.id),
        ):
            await page.goto(f"{server.url}/runs?{query}")
            await expect(rows).to_have_count(1)
            assert await rows.first.get_attribute("data-run-id") == expected, query
        await page.goto(f"{server.url}/runs?kind=workflow&node=nobody")
        await expect(page.locator("table.runs")).to_contain_text("No run matches.")
        await page.goto(f"{server.url}/runs?kind=%3Cscript%3E")
        await expect(page.locator(".flash.error")).to_contain_text("kind: '<script>' is not one of")
        await expect(rows).to_have_count(2)  # an unknown kind lists all, and says so

        # The pyworkflow run's page: its step, its step hook (pending), its checkpoint, its events.
        await page.goto(server.url + "/runs")
        await page.locator(f"a[href='/runs/{run_id}']").click()
        await expect(page.locator("#run-status")).to_have_text("suspended")
        await expect(page.locator("#run-workflow")).to_contain_text("console_drafted")
        step_row = page.locator("table.steps tbody tr").first
        await expect(step_row).to_contain_text("completed")
        await expect(step_row).to_contain_text("outline of <b>release notes</b>")
        wait_row = page.locator("table.waits tbody tr").first
        await expect(wait_row).to_contain_text("step_hook")
        await expect(wait_row).to_contain_text("console_review")
        await expect(wait_row.locator(".status")).to_have_text("pending")
        # The pending step hook leads the page, before the run's input and steps.
        order = ["table.waits", "[data-live=io]", "table.steps"]
        assert await in_order(page, *reversed(order)) == order
        await expect(page.locator("section.checkpoint")).to_contain_text('"outlined": "<b>release notes</b>"')
        events = page.locator("table.events")
        for event in ("run_created", "step_completed", "checkpoint_saved", "wait_created", "run_suspended"):
            await expect(events).to_contain_text(event)
        assert await page.locator("main b, main script").count() == 0  # stored text stays text
        await shot(page, "workflow-run")

        # Answered from the inbox (linked from the wait), the run completes and the page says so.
        await wait_row.get_by_role("link", name="answer in the inbox").click()
        card = page.locator("article.hook", has_text=run_id)
        await card.get_by_label("approved").select_option("true")  # the schema form's field
        await card.get_by_role("button", name="Resume").click()
        await expect(page.locator(".flash.ok")).to_contain_text("resumed by rita")
        await pyworkflow.wait_for_run(run_id, timeout=15)
        await page.goto(f"{server.url}/runs/{run_id}")
        await expect(page.locator("#run-status")).to_have_text("completed")
        await expect(page.locator("pre.result")).to_contain_text('"approved": true')
        await expect(page.locator("table.waits tbody tr").first.locator(".status")).to_have_text("received")
        order = ["pre.result", "table.waits", "table.steps"]  # answered: the result leads
        assert await in_order(page, *reversed(order)) == order
        await expect(page.locator("table.events")).to_contain_text("run_completed")
        await page.goto(f"{server.url}/runs/nope")
        await expect(page.locator("main")).to_contain_text("There is no run 'nope'.")
        assert dialogs == []
    finally:
        await pyworkflow.shutdown()
        pyworkflow.configure()
