"""The graph server behind a real TLS-terminating reverse proxy (``atfg_proxy.ReverseProxy``:
HTTPS on real sockets in front of a real server subprocess), with the proxy's address trusted
(``--trusted-proxy 127.0.0.2``): console cookies are ``Secure``, decision links, webhook URLs and
redirects are built on the https address the caller used, and the access log and the audit
trail's per-address bound see the caller's address. The same headers sent straight to the
server by an untrusted peer change none of it, and ``--public-url`` wins over every header."""

from __future__ import annotations

import json
import re
from collections.abc import Iterator
from pathlib import Path
from typing import Any

import httpx
import pytest
from atfg_harness import ServerProcess, wait_until
from atfg_proxy import ReverseProxy

PROXY_SOURCE = "127.0.0.2"
#: What a caller might send to pass for someone else, or for https.
SPOOFED = {
    "X-Forwarded-For": "198.51.100.7",
    "X-Forwarded-Proto": "https",
    "X-Forwarded-Host": "evil.example",
    "Forwarded": 'for=198.51.100.8;proto=https;host="evil.example"',
}


def started(tmp_path: Path, *args: str) -> ServerProcess:
    server = ServerProcess(
        tmp_path,
        args=(
            "--trusted-proxy",
            PROXY_SOURCE,
            "--log-level",
            "info",
            "--log-format",
            "json",
            "--access-log",
            *args,
        ),
    )
    server.start()
    return server


@pytest.fixture(params=["x-forwarded", "forwarded"])
def proxied(request: pytest.FixtureRequest, tmp_path: Path) -> Iterator[tuple[ServerProcess, ReverseProxy]]:
    server = started(tmp_path)
    proxy = ReverseProxy(server.url, tmp_path, style=request.param, source=PROXY_SOURCE).start()
    yield server, proxy
    proxy.close()
    server.close()


def via(proxy: ReverseProxy, source: str = "127.0.0.3", **options: Any) -> httpx.Client:
    """A client of the proxy's https address, connecting from ``source``."""
    transport = httpx.HTTPTransport(verify=proxy.client_tls(), local_address=source)
    return httpx.Client(base_url=proxy.url, transport=transport, timeout=30, **options)


def csrf(html: str) -> str:
    found = re.search(r'name="csrf" value="([^"]+)"', html)
    assert found, html
    return found.group(1)


def pending_approval(http: httpx.Client, headers: dict[str, str]) -> str:
    trav = http.post("/api/v2/traversers", json={"target": "nobody.skill"}, headers=headers).json()["id"]
    body = {"traverser_id": trav, "operation_key": "k", "prompt": "Refund 480 AUD?", "pause": False}
    r = http.post("/api/v2/approvals", json=body, headers=headers)
    assert r.status_code == 200, r.text
    approval_id: str = r.json()["approval"]["id"]
    return approval_id


def access_log(server: ServerProcess, path: str) -> list[dict[str, Any]]:
    records = []
    for line in server.log.read_text().splitlines():
        if line.startswith("{") and '"atfgraph.access"' in line:
            record = json.loads(line)
            if record["path"] == path:
                records.append(record)
    return records


def denied_decisions(server: ServerProcess) -> list[dict[str, Any]]:
    items: list[dict[str, Any]] = server.get("/audit", limit=100)["items"]
    return [e for e in items if e["action"] == "approval.decide" and e["outcome"] == "denied"]


def test_behind_a_trusted_tls_proxy_cookies_are_secure_and_urls_are_the_callers(
    proxied: tuple[ServerProcess, ReverseProxy],
) -> None:
    server, proxy = proxied
    owner = server.headers()
    with via(proxy) as http:
        # The console: both cookies Secure, and the browser-like client sends them back over https.
        login = http.get("/login")
        assert login.status_code == 200
        assert "Secure" in login.headers["set-cookie"], login.headers["set-cookie"]
        signed = http.post("/login", data={"csrf": csrf(login.text), "token": server.token()})
        assert (signed.status_code, signed.headers["location"]) == (303, "/"), signed.text
        assert re.search(r"atfg_console=[^;]+;.*Secure", signed.headers["set-cookie"]), signed.headers
        assert http.get("/").status_code == 200  # signed in: the Secure cookie came back
        # An absolute redirect (a trailing slash) names the caller's https address.
        slash = http.get("/api/v2/approvals/", headers=owner)
        assert (slash.status_code, slash.headers["location"]) == (307, f"{proxy.url}/api/v2/approvals")
        # Decision links and webhook URLs: on the https address, and they work through the proxy.
        approval_id = pending_approval(http, owner)
        link = http.post(f"/api/v2/approvals/{approval_id}/links", json={}, headers=owner).json()
        assert link["url"].startswith(f"{proxy.url}/d/"), link["url"]
        page = http.get(link["url"].removeprefix(proxy.url))
        assert page.status_code == 200 and "Refund 480 AUD?" in page.text
        hook = http.post(f"/api/v2/waits/{approval_id}/webhooks", json={}, headers=owner).json()
        assert hook["url"] == f"{proxy.url}/api/v2/webhooks/{hook['link']['id']}"
        # What a caller claims about itself is not what the proxy saw: the log has the caller.
        assert http.get("/livez", headers=SPOOFED).status_code == 200
    # Anonymous attempts are bounded per caller address: three callers, three rows.
    for source in ("127.0.0.4", "127.0.0.5", "127.0.0.6"):
        with via(proxy, source) as anonymous:
            assert anonymous.post(f"/api/v2/approvals/{approval_id}/decide", json={}).status_code == 401
    wait_until(lambda: access_log(server, "/livez"), 10, "the access log never showed /livez")
    assert [r["client"] for r in access_log(server, "/livez")] == ["127.0.0.3"]
    decide = f"/api/v2/approvals/{approval_id}/decide"
    # A request's access line is written once its answer went out: the caller can read its 401
    # before the line is in the log, so wait for the three lines before reading them.
    wait_until(lambda: len(access_log(server, decide)) >= 3, 10, "the access log never showed 3 decisions")
    assert sorted(r["client"] for r in access_log(server, decide)) == ["127.0.0.4", "127.0.0.5", "127.0.0.6"]
    assert len(denied_decisions(server)) == 3
    assert proxy.forwarded >= 12


def test_an_untrusted_peer_sending_the_same_headers_changes_nothing(tmp_path: Path) -> None:
    """Straight to the server from 127.0.0.1 (not a trusted proxy): no Secure cookie, links and
    redirects on the plain address it listens on, its own address in the log and the audit bound."""
    server = started(tmp_path)
    owner = {**server.headers(), **SPOOFED}
    try:
        with httpx.Client(base_url=server.url, timeout=30, headers=SPOOFED) as http:
            login = http.get("/login")
            assert login.status_code == 200 and "secure" not in login.headers["set-cookie"].lower()
            slash = http.get("/api/v2/approvals/", headers=owner)
            assert slash.headers["location"] == f"{server.url}/api/v2/approvals"
            approval_id = pending_approval(http, owner)
            link = http.post(f"/api/v2/approvals/{approval_id}/links", json={}, headers=owner).json()
            assert link["url"].startswith(f"{server.url}/d/"), link["url"]
            # Rotating the claimed address does not make one caller many.
            for n in range(5):
                spoof = {"X-Forwarded-For": f"203.0.113.{n}", "Forwarded": f"for=203.0.113.{n}"}
                r = http.post(f"/api/v2/approvals/{approval_id}/decide", json={}, headers=spoof)
                assert r.status_code == 401
        decide = f"/api/v2/approvals/{approval_id}/decide"
        wait_until(
            lambda: len(access_log(server, decide)) == 5, 10, "the access log never showed the attempts"
        )
        assert {r["client"] for r in access_log(server, decide)} == {"127.0.0.1"}
        assert len(denied_decisions(server)) == 1
    finally:
        server.close()


def test_the_public_url_wins_over_a_trusted_proxys_headers(tmp_path: Path) -> None:
    server = started(tmp_path, "--public-url", "https://review.example.com")
    proxy = ReverseProxy(server.url, tmp_path, source=PROXY_SOURCE).start()
    try:
        with via(proxy) as http:
            approval_id = pending_approval(http, server.headers())
            link = http.post(
                f"/api/v2/approvals/{approval_id}/links", json={}, headers=server.headers()
            ).json()
            assert link["url"].startswith("https://review.example.com/d/"), link["url"]
            # The cookie still follows the request's own scheme.
            assert "Secure" in http.get("/login").headers["set-cookie"]
    finally:
        proxy.close()
        server.close()
