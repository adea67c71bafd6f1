"""Console sessions, CSRF tokens and the security headers of every console response.

A session is a random id in an HttpOnly, SameSite=Strict cookie. The server's database keeps the
SHA-256 digest of that id (never the id itself), the id of the bearer token the session was
opened with, its CSRF token and the messages for the next page: so every server sharing the
database knows the session, and a restart does not sign anyone out. The raw bearer token is
used once, at sign-in, and kept nowhere. Every request re-verifies the token by its id, so
revoking it ends the session at once (on another server sharing a PostgreSQL database, within
its 2-second token cache); a session idle for 8 hours is closed.

CSRF: every form carries the session's CSRF token in a hidden field, compared in constant time.
The sign-in form, which has no session yet, uses a double-submit nonce (an HttpOnly cookie and
the same value in the form). SameSite=Strict already keeps other sites' forms from carrying the
cookie; the token is the second lock.
"""

from __future__ import annotations

import hashlib
import hmac
import secrets
import time
from dataclasses import dataclass, field
from typing import Any

import orjson
from starlette.types import ASGIApp, Message, Receive, Scope, Send

from pyworkflow.store import GroupCommitWriter

SESSION_COOKIE = "atfg_console"
LOGIN_COOKIE = "atfg_console_login"
#: A session unused for this long is closed (its cookie is a session cookie anyway).
IDLE_SECONDS = 8 * 3600
#: ``last_seen`` is written at most this often per session (a page view is otherwise a read).
TOUCH_SECONDS = 60

CSP = "default-src 'self'; frame-ancestors 'none'; base-uri 'none'; form-action 'self'"
SECURITY_HEADERS: tuple[tuple[bytes, bytes], ...] = (
    (b"content-security-policy", CSP.encode()),
    (b"x-content-type-options", b"nosniff"),
    (b"x-frame-options", b"DENY"),
    (b"referrer-policy", b"no-referrer"),
)
#: Paths that belong to the API or the probes rather than the console.
_NOT_CONSOLE = ("/api/", "/livez", "/readyz")

SQL_OPEN = """
INSERT INTO atfg_console_sessions (digest, token_id, csrf, created_at, last_seen) VALUES (?, ?, ?, ?, ?)
"""
SQL_GET = "SELECT token_id, csrf, last_seen, flashes FROM atfg_console_sessions WHERE digest = ?"
SQL_TOUCH = "UPDATE atfg_console_sessions SET last_seen = ? WHERE digest = ?"
SQL_CLOSE = "DELETE FROM atfg_console_sessions WHERE digest = ?"
# Idle sessions, by atfg_console_sessions_idle (run when a session opens).
SQL_CLOSE_IDLE = "DELETE FROM atfg_console_sessions WHERE last_seen < ?"
SQL_FLASHES = "SELECT flashes FROM atfg_console_sessions WHERE digest = ? /*FOR UPDATE*/"
SQL_SET_FLASHES = "UPDATE atfg_console_sessions SET flashes = ? WHERE digest = ?"


def _digest(session_id: str) -> bytes:
    return hashlib.sha256(session_id.encode()).digest()


@dataclass(slots=True)
class Session:
    #: the cookie's value (this request only; the database has its digest)
    id: str
    token_id: str
    csrf: str
    last_seen: float
    #: Messages for this page (POST-redirect-GET), taken from the database: (kind, text).
    flashes: list[tuple[str, str]] = field(default_factory=list)

    @property
    def digest(self) -> bytes:
        return _digest(self.id)


class Sessions:
    """The console sessions stored in the server's database (SQLite or PostgreSQL)."""

    def __init__(self, db: GroupCommitWriter[Any]) -> None:
        self.db = db

    async def open(self, token_id: str) -> Session:
        session = Session(secrets.token_urlsafe(32), token_id, secrets.token_urlsafe(32), time.time())

        def tx(conn: Any) -> None:
            conn.execute(SQL_CLOSE_IDLE, (session.last_seen - IDLE_SECONDS,))
            conn.execute(
                SQL_OPEN, (session.digest, token_id, session.csrf, session.last_seen, session.last_seen)
            )

        await self.db.write(tx)
        return session

    def get(self, session_id: str | None) -> Session | None:
        """The live session a cookie names (one indexed read), or None."""
        if not session_id or len(session_id) > 100:
            return None
        row = self.db.reader().execute(SQL_GET, (_digest(session_id),)).fetchone()
        if row is None or time.time() - row[2] > IDLE_SECONDS:
            return None
        flashes = [(str(k), str(t)) for k, t in orjson.loads(row[3])] if row[3] else []
        return Session(session_id, str(row[0]), str(row[1]), float(row[2]), flashes)

    async def touch(self, session: Session, *, take_flashes: bool) -> None:
        """Record use (at most once a minute) and, for a page about to be shown, take its messages
        out of the database (they are in ``session.flashes`` for this page)."""
        now = time.time()
        touch = now - session.last_seen >= TOUCH_SECONDS
        take = take_flashes and bool(session.flashes)
        if not touch and not take:
            return

        def tx(conn: Any) -> None:
            if touch:
                conn.execute(SQL_TOUCH, (now, session.digest))
            if take:
                conn.execute(SQL_SET_FLASHES, (None, session.digest))

        await self.db.write(tx)

    async def flash(self, session: Session, kind: str, text: str) -> None:
        """Keep a message for the session's next page."""

        def tx(conn: Any) -> None:
            row = conn.execute(SQL_FLASHES, (session.digest,)).fetchone()
            if row is None:
                return  # closed meanwhile
            messages = orjson.loads(row[0]) if row[0] else []
            messages.append([kind, text])
            conn.execute(SQL_SET_FLASHES, (orjson.dumps(messages[-20:]), session.digest))

        await self.db.write(tx)

    async def close(self, session: Session) -> None:
        await self.db.write(lambda conn: conn.execute(SQL_CLOSE, (session.digest,)))


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
