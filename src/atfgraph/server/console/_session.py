"""Console sessions, CSRF tokens and the security headers of every console response.

A session is a random id in an HttpOnly, SameSite=Strict cookie; the server keeps, in this
process's memory only, the bearer token it was opened with, its CSRF token and its principal.
Every request re-verifies that token, so revoking it ends the session at once; restarting the
server ends every session (people sign in again). The raw token never leaves the server again:
not in the cookie, not in a page.

CSRF: every form carries the session's CSRF token in a hidden field, compared in constant time.
The sign-in form, which has no session yet, uses a double-submit nonce (an HttpOnly cookie and
the same value in the form). SameSite=Strict already keeps other sites' forms from carrying the
cookie; the token is the second lock.
"""

from __future__ import annotations

import hmac
import secrets
import time
from dataclasses import dataclass, field

from starlette.types import ASGIApp, Message, Receive, Scope, Send

from .._identity import Principal

SESSION_COOKIE = "atfg_console"
LOGIN_COOKIE = "atfg_console_login"
#: A session unused for this long is closed (its cookie is a session cookie anyway).
IDLE_SECONDS = 8 * 3600
#: At most this many live sessions per process; the least recently used is closed first.
MAX_SESSIONS = 10_000

CSP = "default-src 'self'; frame-ancestors 'none'; base-uri 'none'; form-action 'self'"
SECURITY_HEADERS: tuple[tuple[bytes, bytes], ...] = (
    (b"content-security-policy", CSP.encode()),
    (b"x-content-type-options", b"nosniff"),
    (b"x-frame-options", b"DENY"),
    (b"referrer-policy", b"no-referrer"),
)
#: Paths that belong to the API or the probes rather than the console.
_NOT_CONSOLE = ("/api/", "/livez", "/readyz")


@dataclass(slots=True)
class Session:
    id: str
    token: str
    csrf: str
    principal: Principal
    last_seen: float
    #: Messages for the next page (POST-redirect-GET): (kind, text), kind "ok" or "error".
    flashes: list[tuple[str, str]] = field(default_factory=list)

    def flash(self, kind: str, text: str) -> None:
        self.flashes.append((kind, text))

    def take_flashes(self) -> list[tuple[str, str]]:
        taken, self.flashes = self.flashes, []
        return taken


class Sessions:
    """The live console sessions of this server process."""

    def __init__(self) -> None:
        self._by_id: dict[str, Session] = {}

    def open(self, token: str, principal: Principal) -> Session:
        if len(self._by_id) >= MAX_SESSIONS:
            oldest = min(self._by_id.values(), key=lambda s: s.last_seen)
            self._by_id.pop(oldest.id, None)
        session = Session(secrets.token_urlsafe(32), token, secrets.token_urlsafe(32), principal, time.time())
        self._by_id[session.id] = session
        return session

    def get(self, session_id: str | None) -> Session | None:
        if not session_id or len(session_id) > 100:
            return None
        session = self._by_id.get(session_id)
        if session is None:
            return None
        now = time.time()
        if now - session.last_seen > IDLE_SECONDS:
            self._by_id.pop(session_id, None)
            return None
        session.last_seen = now
        return session

    def close(self, session_id: str) -> None:
        self._by_id.pop(session_id, None)


def same_secret(expected: str | None, given: object) -> bool:
    """Constant-time comparison of a CSRF token or nonce; absent or empty never matches."""
    if not expected or not isinstance(given, str) or not given:
        return False
    return hmac.compare_digest(expected.encode(), given.encode())


class SecurityHeaders:
    """ASGI: add the Content-Security-Policy and its companions to every console response
    (pages, redirects, errors and the stylesheet alike), whichever code produced it."""

    def __init__(self, app: ASGIApp) -> None:
        self.app = app

    async def __call__(self, scope: Scope, receive: Receive, send: Send) -> None:
        if scope["type"] != "http" or scope.get("path", "").startswith(_NOT_CONSOLE):
            await self.app(scope, receive, send)
            return

        async def send_with_headers(message: Message) -> None:
            if message["type"] == "http.response.start":
                names = {name.lower() for name, _ in message.get("headers", ())}
                extra = [(n, v) for n, v in SECURITY_HEADERS if n not in names]
                message = {**message, "headers": [*message.get("headers", ()), *extra]}
            await send(message)

        await self.app(scope, receive, send_with_headers)
