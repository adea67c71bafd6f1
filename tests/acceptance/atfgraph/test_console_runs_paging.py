"""The Runs page in real headless Chromium against a real graph server: search (id, target,
operation key, input text), the status filter with live counts, and cursor pages (older and
newer) that show every run once, with no cap."""

from __future__ import annotations

import httpx
import pytest
from atfg_console import axe_violations, create_token, new_page, shot, sign_in
from atfg_harness import ServerProcess
from playwright.async_api import Browser, expect

pytestmark = pytest.mark.browser

RUNS = 113  # two full pages of 50 and a last one of 13


def submit_runs(server: ServerProcess) -> list[str]:
    """RUNS traversers (no worker: they stay queued), oldest first; one in five on node
    "billing", the rest on "refunds", each with a ticket number in its input."""
    ids = []
    with httpx.Client(base_url=server.url + "/api/v2", headers=server.headers(), timeout=30) as http:
        for n in range(RUNS):
            target = "billing.void_invoice" if n % 5 == 0 else "refunds.request_refund"
            r = http.post("/traversers", json={"target": target, "input": {"ticket": f"QF-{1000 + n}"}})
            assert r.status_code in (200, 201), r.text
            ids.append(r.json()["id"])
        body = {"traverser_id": ids[7], "operation_key": "refund:100%_sure", "prompt": "ok?", "pause": False}
        assert http.post("/approvals", json=body).status_code == 200
    return ids


async def test_runs_are_searched_filtered_counted_and_paged_with_no_cap(
    server: ServerProcess, browser: Browser
) -> None:
    ids = submit_runs(server)
    newest_first = ids[::-1]
    page, dialogs = await new_page(browser)
    assert await sign_in(page, server, create_token(server, "rita", "reviewer")) == 200
    await page.goto(server.url + "/runs")
    rows = page.locator("table.runs tbody tr")

    async def shown() -> list[str]:
        return [str(await rows.nth(i).get_attribute("data-run-id")) for i in range(await rows.count())]

    # Every run once, newest first, over three pages; back again with "newer".
    await expect(page.locator("h1 .count")).to_have_text(f"{RUNS} matching")
    await expect(rows).to_have_count(50)
    assert await page.get_by_role("link", name="← Newer 50").count() == 0
    pages = [await shown()]
    await shot(page, "runs-paged", around=page.locator("main"), height=1000)
    violations = await axe_violations(page)
    assert violations == [], violations
    for size in (50, 13):
        await page.get_by_role("link", name="Older 50 →").click()
        await expect(rows).to_have_count(size)
        pages.append(await shown())
    assert [i for p in pages for i in p] == newest_first
    assert await page.get_by_role("link", name="Older 50 →").count() == 0
    await page.get_by_role("link", name="← Newer 50").click()
    await expect(rows).to_have_count(50)
    assert await shown() == pages[1]
    await page.get_by_role("link", name="← Newer 50").click()
    assert await shown() == pages[0]
    assert await page.get_by_role("link", name="← Newer 50").count() == 0

    # Search: by target, input text, id, operation key; LIKE's wildcards are matched as typed.
    search = page.get_by_role("searchbox", name="Search")
    for query, expected in (
        ("void_invoice", [i for n, i in enumerate(ids) if n % 5 == 0][::-1]),
        ("qf-1042", [ids[42]]),
        (ids[99][:12], [ids[99]]),
        ("100%_sure", [ids[7]]),
        ("100%x", []),
    ):
        await search.fill(query)
        await page.get_by_role("button", name="Filter").click()
        await expect(page.locator("h1 .count")).to_have_text(f"{len(expected)} matching")
        assert (await shown() if expected else []) == expected[:50], query
    await expect(page.locator("table.runs")).to_contain_text("No run matches.")

    # The status filter, by its counts; a cancellation elsewhere updates the counts live.
    await page.goto(server.url + "/runs?node=billing")
    counts = page.locator("nav.status-counts")
    await expect(counts.locator("[data-status=queued] .count")).to_have_text("23")
    await expect(counts.locator("[data-status=cancelled] .count")).to_have_text("0")
    with httpx.Client(base_url=server.url + "/api/v2", headers=server.headers(), timeout=30) as http:
        for run_id in (ids[0], ids[5]):
            assert http.post(f"/traversers/{run_id}/cancel").status_code == 200
    await expect(counts.locator("[data-status=cancelled] .count")).to_have_text("2", timeout=10_000)
    await expect(counts.locator("[data-status=queued] .count")).to_have_text("21")
    await counts.get_by_role("link", name="cancelled").click()
    await expect(rows).to_have_count(2)
    assert await shown() == [ids[5], ids[0]]
    assert "node=billing" in page.url and "status=cancelled" in page.url

    # A cursor that is not one is said so, and the first page is shown.
    await page.goto(server.url + "/runs?after=yesterday")
    await expect(page.locator(".flash.error")).to_contain_text(
        "after: 'yesterday' is not a page of this list of runs"
    )
    await expect(rows).to_have_count(50)
    await page.goto(server.url + "/runs?before=nan~x")
    await expect(page.locator(".flash.error")).to_contain_text("before: 'nan~x' is not a page")
    assert dialogs == []
