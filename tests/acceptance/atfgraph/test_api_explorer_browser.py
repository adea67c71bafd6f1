"""The API explorer at /api/v2/docs works with no network but the server's: Swagger UI's page,
script and stylesheet come from the server (the swagger-ui-bundle-v2 package), and it renders
every operation of the live document, in real headless Chromium. Any request to another host is
aborted and recorded, so a page that still reached for a CDN fails here."""

from __future__ import annotations

from urllib.parse import urlsplit

import httpx
from atfg_console import new_page
from atfg_harness import ServerProcess
from playwright.async_api import Browser, Route, expect


async def test_the_explorer_renders_every_operation_offline(server: ServerProcess, browser: Browser) -> None:
    doc = httpx.get(server.url + "/api/v2/openapi.json", timeout=10).json()
    operations = sum(1 for item in doc["paths"].values() for method in item if method != "parameters")
    assert operations >= 30
    page, _ = await new_page(browser)
    ours = urlsplit(server.url).netloc
    elsewhere: list[str] = []

    async def offline(route: Route) -> None:
        if urlsplit(route.request.url).netloc == ours:
            await route.continue_()
        else:
            elsewhere.append(route.request.url)
            await route.abort("internetdisconnected")

    await page.context.route("**/*", offline)
    response = await page.goto(server.url + "/api/v2/docs")
    assert response is not None and response.status == 200
    await expect(page.locator(".swagger-ui .info .title")).to_contain_text("atfgraph graph server")
    await expect(page.locator(".opblock")).to_have_count(operations, timeout=20_000)
    # The security scheme is there to use: Authorize opens the bearer token's form.
    await page.get_by_role("button", name="Authorize").first.click()
    await expect(page.locator(".auth-container")).to_contain_text("bearerAuth")
    assert elsewhere == [], elsewhere
