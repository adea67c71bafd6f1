"""One run's page in real headless Chromium (Debian's ``chromium``, through Playwright), against
a real graph server, a worker subprocess and pyworkflow's local runtime on the same database:

- a traverser's checkpoint history (the last 20 revisions kept) with the diff between each
  revision and the one before, its steps with their results, the durations on the timeline,
  and its question given as Markdown, rendered safely (hostile input stays text);
- a pyworkflow run on the same page, retried from the console after it failed (its failed step
  runs again, its completed step is replayed) and another cancelled, each confirmed first and
  audited.

Screenshots land in test-artifacts/console/ (gitignored); docs/img/console-*.png are copies."""

from __future__ import annotations

from collections.abc import Callable
from typing import Any

import pytest
from atfg_console import audit, axe_violations, create_token, in_order, new_page, shot, sign_in
from atfg_harness import ServerProcess, WorkerProcess
from atfg_waits import only_approval, reach
from playwright.async_api import Browser, expect

import pyworkflow
from atfgraph import Client
from pyworkflow import hook, step, workflow

pytestmark = pytest.mark.browser

QUESTION = """Refund **480 AUD** on `QF-4417`?

- the receipt is [in the log](https://ops.example.com/log?case=QF-4417&x="y")
- do *not* follow [this](javascript:alert(document.cookie)) or <javascript:alert(1)>

<script>window.pwned = 1</script><img src=x onerror="window.pwned = 2">
[quoted](https://ex.example/" onmouseover="window.pwned=3)"""


async def test_a_traversers_checkpoint_history_diffs_and_safe_markdown_question(
    server: ServerProcess, spawn_worker: Callable[..., WorkerProcess], client: Client, browser: Browser
) -> None:
    spawn_worker()
    handle = await client.submit("tester.revising", {"question": QUESTION, "revisions": 23})
    await reach(client, handle.id, "waiting")
    approval = await only_approval(client, handle.id)
    page, dialogs = await new_page(browser)
    assert await sign_in(page, server, server.token("owner")) == 200
    await page.goto(f"{server.url}/runs/{handle.id}")

    # The question: the safe subset rendered, everything else text; it leads the page, before
    # the run's input and steps.
    card = page.locator(f"article[data-approval-id='{approval['id']}']")
    card_css = f"article[data-approval-id='{approval['id']}']"
    assert await in_order(page, "table.steps", "[data-live=io]", card_css, "h1") == [
        "h1",
        card_css,
        "[data-live=io]",
        "table.steps",
    ]
    heading = card.locator("h3.question")
    await expect(heading.locator("strong")).to_have_text("480 AUD")
    await expect(heading.locator("code")).to_have_text("QF-4417")
    body = card.locator(".question-body")
    link = body.get_by_role("link", name="in the log")
    assert await link.get_attribute("href") == "https://ops.example.com/log?case=QF-4417&x=%22y%22"
    assert await link.get_attribute("rel") == "nofollow noopener noreferrer"
    await expect(body.locator("li")).to_have_count(2)
    await expect(body.locator("em")).to_have_text("not")
    assert await body.locator("a").count() == 1  # javascript: and the attribute injection are no links
    await expect(body).to_contain_text("[this](javascript:alert(document.cookie))")
    await expect(body).to_contain_text(
        '<script>window.pwned = 1</script><img src=x onerror="window.pwned = 2">'
    )
    assert await page.locator("main script, main img, main [onmouseover], main [onerror]").count() == 0
    assert await page.evaluate("window.pwned") is None

    # The checkpoint: revision 23, its history (the last 20 kept), each diffed with the one before.
    cp = page.locator("section.checkpoint[data-checkpoint='plan']")
    await expect(cp.locator("h3")).to_contain_text("revision 23")
    await cp.locator("details.history summary").click()
    await expect(cp.locator("details.history summary")).to_have_text("History: 20 revisions kept")
    revs = cp.locator("li.revision")
    await expect(revs).to_have_count(20)
    assert [await revs.nth(i).get_attribute("data-revision") for i in (0, 19)] == ["23", "4"]
    newest = revs.nth(0).locator("table.diff tbody tr")
    # 22 -> 23: step changed, lines [0] -> [0, 1] (one added), note_22 removed, note_23 added.
    rows = {}
    for i in range(await newest.count()):
        cells = newest.nth(i).locator("td")
        rows[await cells.nth(0).inner_text()] = await cells.nth(1).inner_text()
    assert rows == {"/step": "changed", "/lines/1": "added", "/note_22": "removed", "/note_23": "added"}, rows
    await expect(revs.nth(0)).to_contain_text("after revision 22")
    await expect(revs.nth(19)).to_contain_text("The oldest revision kept")
    await expect(revs.nth(19).locator("pre")).to_contain_text('"note_4": "revision 4"')

    # The timeline: durations of what the record times (each revision since the one before).
    timeline = page.locator("table.timeline")
    await expect(timeline).to_contain_text("plan (revision 23)")
    assert await timeline.locator("td.took").filter(has_text="ms").count() >= 19
    violations = await axe_violations(page)
    assert violations == [], violations
    await shot(page, "run-history", around=cp, height=1000)

    # Approve from the card: the run continues, its page says so; the question heads the record.
    await card.get_by_role("button", name="Approve").click()
    await expect(page.locator(".flash.ok")).to_contain_text("approved by owner")
    result = await handle.result(timeout=30)
    assert result["decision"]["status"] == "approved"
    await page.goto(f"{server.url}/runs/{handle.id}")
    await expect(page.locator("#run-status")).to_have_text("succeeded")
    await expect(page.locator(".approval-decided .question strong")).to_have_text("480 AUD")
    # Nothing asked any more: the input and result come first, the decided approval after them.
    assert await in_order(page, "table.steps", ".approval-decided", "pre.result") == [
        "pre.result",
        ".approval-decided",
        "table.steps",
    ]
    await expect(timeline.locator("tr", has_text="approval approved").locator("td.took")).not_to_be_empty()
    await expect(timeline.locator("tr", has_text="succeeded").locator("td.took")).not_to_be_empty()
    assert dialogs == []


# -- a pyworkflow run on the same page ---------------------------------------------------------

FLAKY: dict[str, Any] = {"fail": True, "calls": 0}


@step(max_retries=0)
async def console_prepare(doc: str) -> str:
    return f"prepared {doc}"


@step(max_retries=0)
async def console_flaky(prepared: str) -> str:
    FLAKY["calls"] += 1
    if FLAKY["fail"]:
        raise RuntimeError("the printer is out of paper")
    return f"printed {prepared}"


@workflow
async def console_printing(doc: str) -> dict[str, Any]:
    prepared = await console_prepare(doc)
    return {"printed": await console_flaky(prepared)}


@workflow
async def console_waiting(doc: str) -> dict[str, Any]:
    return {"answer": await hook("never_answered")}


async def test_a_pyworkflow_run_is_retried_and_another_cancelled_from_its_page(
    server: ServerProcess, browser: Browser
) -> None:
    pyworkflow.configure(storage=server.storage_url, poll_interval=0.05)
    try:
        FLAKY.update(fail=True, calls=0)
        failed = await pyworkflow.start(console_printing, "minutes")
        assert (await pyworkflow.wait_for_run(failed, timeout=15)).status == pyworkflow.RunStatus.FAILED
        waiting = await pyworkflow.start(console_waiting, "memo")
        await pyworkflow.wait_for_run(waiting, timeout=15, until=("suspended",))
        reviewer = create_token(server, "rita", "reviewer")
        page, dialogs = await new_page(browser)
        assert await sign_in(page, server, reviewer) == 200
        await page.goto(f"{server.url}/runs/{failed}")
        await expect(page.locator("#run-status")).to_have_text("failed")
        assert await page.get_by_role("button", name="Retry…").count() == 0  # a reviewer may not
        await page.context.clear_cookies()

        assert await sign_in(page, server, server.token("owner")) == 200
        await page.goto(f"{server.url}/runs/{failed}")
        await expect(page.locator("pre.error").first).to_contain_text("out of paper")
        steps = page.locator("table.steps tbody tr")
        await expect(steps).to_have_count(2)
        await expect(page.locator("tr[data-step-key*='console_prepare']")).to_contain_text("prepared minutes")
        await expect(page.locator("tr[data-step-key*='console_flaky'] .status")).to_have_text("failed")
        took = page.locator("table.timeline tr", has_text="step completed").locator("td.took")
        await expect(took).not_to_be_empty()
        await page.get_by_role("button", name="Retry…").click()
        confirm = page.get_by_role("alertdialog")
        await expect(confirm).to_contain_text("A pyworkflow runtime serving this database")
        await shot(page, "workflow-retry-confirm")
        FLAKY["fail"] = False
        await confirm.get_by_role("button", name="Yes, retry the run").click()
        await expect(page.locator(".flash.ok")).to_contain_text("queued again by owner")
        done = await pyworkflow.wait_for_run(failed, timeout=15)
        assert done.status == pyworkflow.RunStatus.COMPLETED
        assert done.result == {"printed": "printed prepared minutes"}
        assert FLAKY["calls"] == 2  # the failed step ran again; the completed one was replayed
        await expect(page.locator("#run-status")).to_have_text("completed", timeout=15_000)  # live
        await expect(page.locator("table.events")).to_contain_text("run_retried")
        await shot(page, "workflow-retried")
        assert [(e["action"], e["outcome"]) for e in audit(server, failed) if e["action"] == "run.retry"] == [
            ("run.retry", "allowed")
        ]

        await page.goto(f"{server.url}/runs/{waiting}")
        await expect(page.locator("#run-status")).to_have_text("suspended")
        await page.get_by_role("button", name="Cancel run…").click()
        await page.get_by_role("button", name="Yes, cancel the run").click()
        await expect(page.locator(".flash.ok")).to_contain_text("cancelled by owner")
        await expect(page.locator("#run-status")).to_have_text("cancelled")
        await expect(page.locator("table.waits tbody tr .status")).to_have_text("cancelled")
        assert (await pyworkflow.get_workflow_run(waiting)).status == pyworkflow.RunStatus.CANCELLED
        assert await page.get_by_role("button", name="Retry…").count() == 0  # only a failed run
        assert dialogs == []
    finally:
        await pyworkflow.shutdown()
        pyworkflow.configure()
