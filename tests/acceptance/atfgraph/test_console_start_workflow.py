"""Starting a pyworkflow run by workflow name from the console's Runs page, in real headless
Chromium against a real graph server: the form's kind chooses a traverser or a pyworkflow run;
a refused form keeps what was typed (the kind too) and says why beside the field; a start lands
on the run's page, which says plainly that nothing serving the database has claimed it yet,
until a pyworkflow process with the workflow registered (``atfg_flows``) starts and runs it,
which the page shows live; the start is audited; a reviewer's POST is refused."""

from __future__ import annotations

from typing import Any

import httpx
import pytest
from atfg_console import audit, axe_violations, create_token, new_page, shot, sign_in
from atfg_flows import FlowsProcess
from atfg_harness import ServerProcess
from playwright.async_api import Browser, expect

pytestmark = pytest.mark.browser


def workflow_runs(server: ServerProcess) -> list[dict[str, Any]]:
    with httpx.Client(base_url=server.url + "/api/v2", headers=server.headers(), timeout=30) as http:
        items: list[dict[str, Any]] = http.get("/runs", params={"kind": "workflow"}).json()["items"]
        return items


async def test_a_pyworkflow_run_is_started_from_the_runs_page_and_runs_once_served(
    server: ServerProcess, browser: Browser
) -> None:
    page, dialogs = await new_page(browser)
    assert await sign_in(page, server, create_token(server, "sam", "administrator")) == 200
    await page.goto(server.url + "/runs")
    await page.get_by_text("Start a run").click()
    form = page.get_by_role("form", name="Start a run")
    kind = form.get_by_role("radio", name="a pyworkflow run")
    name, inputs = form.get_by_label("Workflow name"), form.get_by_label("Input", exact=False)

    # Not JSON: 422, the page again with the kind, the name and the input as typed.
    half_typed = '{"a": 20, "b": '
    await kind.check()
    await name.fill("flows:sum")
    await inputs.fill(half_typed)
    async with page.expect_navigation() as nav:
        await form.get_by_role("button", name="Start").click()
    assert (await nav.value).status == 422  # type: ignore[union-attr]
    await expect(kind).to_be_checked()
    await expect(name).to_have_value("flows:sum")
    await expect(inputs).to_have_value(half_typed)
    await expect(page.locator("#start-input-error")).to_contain_text("not JSON")
    # A blank name and an array for input: both said beside their fields, nothing started.
    await name.fill("   ")
    await inputs.fill("[1, 2]")
    async with page.expect_navigation():
        await form.get_by_role("button", name="Start").click()
    await expect(kind).to_be_checked()
    await expect(page.locator("#start-workflow-error")).to_contain_text("registered under")
    await expect(name).to_have_attribute("aria-invalid", "true")
    await expect(page.locator("#start-input-error")).to_contain_text("workflow's keyword arguments")
    assert workflow_runs(server) == []
    violations = await axe_violations(page)
    assert violations == [], violations
    await shot(page, "console-start-workflow-refused", around=page.locator("details.start"), height=760)

    # Started: on its page, which says nothing serving the database has claimed it yet.
    await name.fill("flows:sum")
    await inputs.fill('{"a": 20, "b": 22, "note": "from the console"}')
    async with page.expect_navigation():
        await form.get_by_role("button", name="Start").click()
    [run] = workflow_runs(server)
    assert page.url.endswith(f"/runs/{run['id']}") and run["workflow"] == "flows:sum"
    await expect(page.locator(".flash.ok")).to_contain_text(f"Run {run['id']} of workflow flows:sum started")
    await expect(page.locator(".flash.ok")).to_contain_text(
        "Nothing serving this database has claimed it yet"
    )
    await expect(page.locator("#run-status")).to_have_text("pending")
    unclaimed = page.locator("#run-unclaimed")
    await expect(unclaimed).to_contain_text("Nothing serving this database has claimed it yet")
    await expect(unclaimed).to_contain_text("flows:sum")
    started = [e for e in audit(server, run["id"]) if e["action"] == "run.start"]
    assert [(e["principal"], e["detail"]) for e in started] == [("sam", {"workflow": "flows:sum"})]

    # A pyworkflow process with the workflow registered serves the database: the page follows.
    flows = FlowsProcess(server).start()
    try:
        await expect(page.locator("#run-status")).to_have_text("completed", timeout=30_000)
        await expect(unclaimed).to_have_count(0)
        await expect(page.locator("pre.json.result")).to_contain_text('"sum": 42')
        await expect(page.locator("pre.json.result")).to_contain_text("from the console")
    finally:
        flows.kill()
    assert dialogs == []


async def test_a_traverser_is_still_the_default_kind_and_a_reviewers_post_is_refused(
    server: ServerProcess, browser: Browser
) -> None:
    page, _ = await new_page(browser)
    assert await sign_in(page, server, create_token(server, "sam", "administrator")) == 200
    await page.goto(server.url + "/runs")
    await page.get_by_text("Start a run").click()
    form = page.get_by_role("form", name="Start a run")
    await expect(form.get_by_role("radio", name="a traverser")).to_be_checked()
    token = create_token(server, "rita", "reviewer")
    with httpx.Client(base_url=server.url, timeout=30) as http:
        r = http.post(
            "/runs",
            data={"kind": "workflow", "workflow": "flows:sum", "input": "{}"},
            headers={"authorization": f"Bearer {token}"},
        )
    assert r.status_code == 403, r.text
    assert workflow_runs(server) == []
