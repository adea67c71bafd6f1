"""Driving the console in real headless Chromium (Debian's ``chromium``, through Playwright):
the browser fixture, sign-in, screenshots (test-artifacts/console/, gitignored; docs/img/
console-*.png are copies) and axe-core, run in the page from the axe-playwright-python
package's axe.min.js (never a CDN)."""

from __future__ import annotations

from collections.abc import AsyncIterator
from pathlib import Path
from typing import Any

import httpx
import pytest
from atfg_harness import REPO, ServerProcess
from axe_playwright_python.async_playwright import Axe
from playwright.async_api import Browser, Locator, Page, async_playwright

CHROMIUM = Path("/usr/bin/chromium")
ARGS = [
    "--no-sandbox",
    "--disable-gpu",
    "--disable-background-networking",
    "--disable-component-update",
    "--disable-sync",
    "--no-first-run",
]
ARTIFACTS = REPO / "test-artifacts" / "console"


async def launch_browser() -> AsyncIterator[Browser]:
    """Debian's chromium, headless (the ``browser`` fixture of conftest.py)."""
    if not CHROMIUM.exists():
        pytest.fail("Debian's chromium is missing: apt-get install -y chromium", pytrace=False)
    async with async_playwright() as pw:
        launched = await pw.chromium.launch(executable_path=str(CHROMIUM), args=ARGS)
        yield launched
        await launched.close()


def create_token(server: ServerProcess, name: str, role: str) -> str:
    """Mint a token through the API with the owner credential the server wrote on first start."""
    r = httpx.post(
        server.url + "/api/v2/tokens", json={"name": name, "role": role}, headers=server.headers(), timeout=10
    )
    assert r.status_code == 201, r.text
    token: str = r.json()["token"]
    return token


def audit(server: ServerProcess, target: str) -> list[dict[str, Any]]:
    r = httpx.get(
        server.url + "/api/v2/audit", params={"target": target}, headers=server.headers(), timeout=10
    )
    r.raise_for_status()
    items: list[dict[str, Any]] = r.json()["items"]
    return items


async def new_page(browser: Browser, size: tuple[int, int] = (1280, 900)) -> tuple[Page, list[str]]:
    """A fresh context (no cookies) and page; returns the messages of any dialog that opened."""
    context = await browser.new_context(viewport={"width": size[0], "height": size[1]})
    page = await context.new_page()
    dialogs: list[str] = []

    async def on_dialog(dialog: Any) -> None:
        dialogs.append(dialog.message)
        await dialog.dismiss()

    page.on("dialog", on_dialog)
    return page, dialogs


async def sign_in(page: Page, server: ServerProcess, token: str) -> int:
    """Fill the sign-in form; returns the status of the form's answer (after redirects)."""
    await page.goto(server.url + "/login")
    await page.locator("input[name=token]").fill(token)
    async with page.expect_navigation() as nav:
        await page.get_by_role("button", name="Sign in").click()
    response = await nav.value
    assert response is not None
    return response.status


async def shot(page: Page, name: str, around: Locator | None = None, height: float = 1100) -> None:
    """The whole page, or (``around``) the part of it from that element down, at most
    ``height`` pixels: for the docs, where a page of 50 rows or 20 revisions is too tall."""
    ARTIFACTS.mkdir(parents=True, exist_ok=True)
    path = str(ARTIFACTS / f"{name}.png")
    box = None if around is None else await around.bounding_box()
    if box is None:
        await page.screenshot(path=path, full_page=True)
        return
    size = page.viewport_size or {"width": 1280, "height": 900}
    top = max(box["y"] + await page.evaluate("window.scrollY") - 16, 0)
    clip = {"x": 0, "y": top, "width": size["width"], "height": min(box["height"] + 32, height)}
    await page.screenshot(path=path, full_page=True, clip=clip)  # type: ignore[arg-type]


async def axe_violations(page: Page) -> list[str]:
    """axe-core's violations on the page as it is now: "rule: target" lines (empty when clean)."""
    results = await Axe().run(page)
    out = []
    for violation in results.response["violations"]:
        for node in violation["nodes"]:
            summary = " ".join(node.get("failureSummary", "").split())
            out.append(f"{violation['id']} ({violation['impact']}): {node['target']} {summary}")
    return out


async def in_order(page: Page, *selectors: str) -> list[str]:
    """``selectors`` (each matching one element on the page) sorted by where their elements
    stand in the document, first to last: what a reader scrolling down meets first."""
    order: list[str] = await page.evaluate(
        """(selectors) => selectors
            .map((s) => [s, document.querySelector(s)])
            .map(([s, el]) => { if (!el) throw new Error("nothing matches " + s); return [s, el]; })
            .sort(([, a], [, b]) =>
                (a.compareDocumentPosition(b) & Node.DOCUMENT_POSITION_FOLLOWING ? -1 : 1))
            .map(([s]) => s)""",
        list(selectors),
    )
    return order


__all__ = [
    "ARTIFACTS",
    "audit",
    "axe_violations",
    "create_token",
    "in_order",
    "launch_browser",
    "new_page",
    "shot",
    "sign_in",
]
