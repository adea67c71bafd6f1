"""The review console over plain HTTP (no browser): redirects, headers, sessions that end when
their token is revoked and survive a restart, and how a form's response text becomes the
decision's response."""

from __future__ import annotations

import contextlib
import hashlib
import re
from collections.abc import Iterator

import httpx
from atfg_harness import ServerProcess, database_dump

from atfgraph import Client

CSP = "default-src 'self'; frame-ancestors 'none'; base-uri 'none'; form-action 'self'"


def create_token(server: ServerProcess, name: str, role: str) -> tuple[str, str]:
    r = httpx.post(
        server.url + "/api/v2/tokens", json={"name": name, "role": role}, headers=server.headers(), timeout=10
    )
    assert r.status_code == 201, r.text
    return r.json()["token"], r.json()["info"]["id"]


def hidden_csrf(html: str) -> str:
    found = re.search(r'name="csrf" value="([^"]+)"', html)
    assert found, html
    return found.group(1)


@contextlib.contextmanager
def signed_in(server: ServerProcess, token: str) -> Iterator[httpx.Client]:
    with httpx.Client(base_url=server.url, timeout=10) as http:
        nonce = hidden_csrf(http.get("/login").text)
        r = http.post("/login", data={"csrf": nonce, "token": token})
        assert (r.status_code, r.headers["location"]) == (303, "/"), r.text
        yield http


def flashes(html: str) -> list[str]:
    return re.findall(r'<p class="flash (?:ok|error)" role="(?:status|alert)">([^<]*)</p>', html)


def test_anonymous_visits_go_to_sign_in_and_every_console_answer_carries_the_csp(
    server: ServerProcess,
) -> None:
    with httpx.Client(base_url=server.url, timeout=10) as http:
        for path in ("/", "/inbox", "/runs", "/runs/nope", "/workers"):
            r = http.get(path)
            assert (r.status_code, r.headers["location"]) == (303, "/login"), path
            assert r.headers["content-security-policy"] == CSP
        for path, kind in (
            ("/login", "text/html"),
            ("/static/console.css", "text/css"),
            ("/static/console.js", "text/javascript"),
        ):
            r = http.get(path)
            assert r.status_code == 200 and r.headers["content-type"].startswith(kind)
            assert r.headers["content-security-policy"] == CSP
            assert r.headers["x-content-type-options"] == "nosniff"
        # The one script is the console's own file (no inline code, no other origin).
        scripts = re.findall(r"<script[^>]*>", http.get("/login").text)
        assert scripts == ['<script src="/static/console.js" defer>'], scripts
        assert http.get("/static/nope.js").status_code == 404
        # A POST that is not signed in is refused outright.
        r = http.post("/hooks/h/resume", data={"payload": "1"})
        assert r.status_code == 403 and r.headers["content-security-policy"] == CSP
        # The API keeps its own answers (JSON, bearer tokens), without the console's headers.
        api = http.get("/api/v2/approvals")
        assert api.status_code == 401 and "content-security-policy" not in api.headers


def test_sign_in_refuses_unknown_tokens_and_forms_without_the_nonce(server: ServerProcess) -> None:
    with httpx.Client(base_url=server.url, timeout=10) as http:
        nonce = hidden_csrf(http.get("/login").text)
        r = http.post("/login", data={"csrf": nonce, "token": "atfg_0123456789abcdef_" + "x" * 32})
        assert r.status_code == 401 and "not valid" in r.text
        assert "atfg_console" not in http.cookies
        r = http.post("/login", data={"token": server.token("owner")})
        assert r.status_code == 403 and "CSRF" in r.text
        assert "atfg_console" not in http.cookies


def test_revoking_a_token_ends_the_console_sessions_opened_with_it(server: ServerProcess) -> None:
    token, token_id = create_token(server, "rita", "reviewer")
    with signed_in(server, token) as http:
        assert http.get("/").status_code == 200
        r = httpx.post(f"{server.url}/api/v2/tokens/{token_id}/revoke", headers=server.headers(), timeout=10)
        assert r.status_code == 200, r.text
        r = http.get("/")
        assert (r.status_code, r.headers["location"]) == (303, "/login")


def test_a_session_survives_a_restart_and_the_database_holds_only_its_digest(server: ServerProcess) -> None:
    """Sessions live in the database: a server killed with SIGKILL and started again knows the
    cookie; the database holds the session id's SHA-256 digest, never the id or the token. Sign
    out ends it for good."""
    token, _ = create_token(server, "sam", "reviewer")
    with signed_in(server, token) as http:
        cookie = http.cookies["atfg_console"]
        page = http.get("/")
        assert page.status_code == 200 and "sam" in page.text
        server.kill()
        server.start()
        again = http.get("/inbox")
        assert again.status_code == 200 and "sam" in again.text, again.headers.get("location")
        dump = database_dump(server)
        assert "atfg_console_sessions" in dump
        assert cookie not in dump and cookie.encode().hex() not in dump
        assert token not in dump and token.encode().hex() not in dump
        assert hashlib.sha256(cookie.encode()).hexdigest() in dump.lower()  # what it does hold (hex)
        r = http.post("/logout", data={"csrf": hidden_csrf(again.text)})
        assert (r.status_code, r.headers["location"]) == (303, "/login")
    with httpx.Client(base_url=server.url, timeout=10, cookies={"atfg_console": cookie}) as replay:
        r = replay.get("/")
        assert (r.status_code, r.headers["location"]) == (303, "/login")


async def test_the_response_field_is_a_note_or_json_and_bad_json_changes_nothing(
    server: ServerProcess, client: Client
) -> None:
    # A queued traverser (no worker serves its node) with an approval that does not pause it.
    handle = await client.submit("nobody.home", {})
    approval = await client.request_approval(handle.id, {"question": "ok?"}, operation_key="q", pause=False)
    token, _ = create_token(server, "rita", "reviewer")
    with signed_in(server, token) as http:
        csrf = hidden_csrf(http.get("/").text)
        url = f"/approvals/{approval['id']}/decide"
        # A refused answer is shown again, as typed, with the reason beside the field (no redirect).
        page = http.post(
            url, data={"csrf": csrf, "decision": "approved", "response": "{oops", "back": "/inbox"}
        )
        assert page.status_code == 422, page.text
        assert ">{oops</textarea>" in page.text
        assert re.search(r'class="field-error"[^>]*>The answer is not valid JSON', page.text), page.text
        page = http.post(url, data={"csrf": csrf, "decision": "maybe", "response": "keep me"})
        assert page.status_code == 422 and ">keep me</textarea>" in page.text
        assert re.search(r'class="field-error form-error"[^>]*>[^<]*validation_error', page.text), page.text
        assert (await client.get_approval(approval["id"]))["status"] == "pending"

        page = http.post(
            url,
            data={"csrf": csrf, "decision": "rejected", "response": "  not this one  "},
            follow_redirects=True,
        )
        assert flashes(page.text) == [f"Approval {approval['id']} rejected by rita."]
        decided = await client.get_approval(approval["id"])
        assert (decided["status"], decided["decided_by"], decided["response"]) == (
            "rejected",
            "rita",
            {"note": "not this one"},
        )
        # A different decision later is refused by the same transition the API uses.
        page = http.post(url, data={"csrf": csrf, "decision": "approved"}, follow_redirects=True)
        assert any("approval_decided" in f for f in flashes(page.text)), page.text

        # Signing out needs the form's token too, then the session is gone.
        assert http.post("/logout", data={}).status_code == 403
        r = http.post("/logout", data={"csrf": csrf})
        assert (r.status_code, r.headers["location"]) == (303, "/login")
        assert http.get("/").status_code == 303


def card_ids(html: str) -> list[str]:
    return re.findall(r'<article class="card approval" id="approval-([0-9a-f]+)"', html)


async def test_the_inbox_searches_filters_by_kind_and_pages_with_a_cursor_without_a_silent_cap(
    server: ServerProcess, client: Client
) -> None:
    handle = await client.submit("nobody.home", {"ticket": "ZX-77", "note": "Mixed_Case 100%"})
    other = await client.submit("nobody.else", {"ticket": "AB-1"})
    made = [
        (await client.request_approval(handle.id, f"q{i}?", operation_key=f"k{i:02}", pause=False))["id"]
        for i in range(52)
    ]
    lone = await client.request_approval(other.id, {"title": "Lone one"}, operation_key="lone", pause=False)
    token, _ = create_token(server, "rita", "reviewer")
    with signed_in(server, token) as http:
        first = http.get("/inbox?kind=approval")
        assert first.status_code == 200
        assert card_ids(first.text) == made[:50]  # oldest first, 50 a page
        assert ">53 waiting<" in first.text and 'data-live="count-approval">53<' in first.text
        after = re.search(r'href="(/inbox\?[^"]+)" rel="next"', first.text)
        assert after, first.text
        second = http.get(after.group(1).replace("&amp;", "&"))
        assert card_ids(second.text) == [*made[50:], lone["id"]]
        assert 'rel="next"' not in second.text and "Back to the oldest" in second.text

        # Search: the operation key, the run's id and target, its input text, any case; the
        # pattern's own % and _ are literal.
        for q, expected in (
            ("k07", [made[7]]),
            ("LONE", [lone["id"]]),
            ("nobody.else", [lone["id"]]),
            (other.id, [lone["id"]]),
            ("mixed_case 100%", made[:50]),
            ("ab-1", [lone["id"]]),
            ("no such text", []),
        ):
            page = http.get("/inbox", params={"q": q, "kind": "approval"})
            assert card_ids(page.text) == expected, q
        assert "No waiting item matches “zzz”." in http.get("/inbox", params={"q": "zzz"}).text
        # The kind filter: no hook is waiting; an unknown kind or cursor lists the first page and says so.
        assert card_ids(http.get("/inbox?kind=hook").text) == []
        bad = http.get("/inbox", params={"kind": "<b>", "after": "x"})
        assert bad.status_code == 200 and "kind: &#39;&lt;b&gt;&#39; is not one of" in bad.text
        assert "is not a page of this inbox" in bad.text and card_ids(bad.text) == made[:50]
        # The live endpoint serves the same regions and leaves the session's messages alone.
        live = http.get("/inbox/live?kind=approval")
        assert live.status_code == 200 and 'data-live="items"' in live.text
