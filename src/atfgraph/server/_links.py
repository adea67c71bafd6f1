"""Capabilities on one wait: decision links for people, webhooks for machines.

A **decision link** (kind ``page``) is the URL ``<public url>/d/<secret>``: whoever holds it may
decide that one approval, once, before it expires, unless it was revoked. The secret is
``<id>_<192 random bits>``; only the SHA-256 digest of the whole secret is stored (like a
token's), and it is compared in constant time. The link is marked used in the transaction of the
decision (``GraphStore.decide(also=...)``), so a link is used exactly when its decision committed.

A **webhook** (kind ``webhook``) is ``POST /api/v2/webhooks/<id>``: the body resumes the wait
(an approval's decision, or a pyworkflow hook's payload) when it carries a valid HMAC-SHA256
signature made with the webhook's secret. That secret is derived from the server's key and the
webhook's id (:meth:`WaitLinks.webhook_secret`), so nothing per webhook needs storing, and every
server sharing the database derives the same one.
"""

from __future__ import annotations

import hashlib
import hmac
import re
import secrets
import time
from dataclasses import dataclass
from enum import StrEnum
from typing import Any

from pyworkflow.store import GroupCommitWriter

from ._body import is_text
from ._graph_rows import Conn, Row, _row, _rows
from ._identity import AuditEntry, write_audit
from ._refusals import Conflict, NotFound
from ._stamps import stamped


class LinkKind(StrEnum):
    PAGE = "page"
    WEBHOOK = "webhook"


class LinkState(StrEnum):
    """A link is ``live`` until it is used (decision links only), revoked or expired."""

    LIVE = "live"
    USED = "used"
    REVOKED = "revoked"
    EXPIRED = "expired"


#: A link lives this long unless its creator says otherwise, and at most MAX_LINK_SECONDS.
DEFAULT_LINK_SECONDS = 24 * 3600.0
MAX_LINK_SECONDS = 30 * 86400.0
MAX_LABEL = 200

LINK_ID_RE = re.compile(r"[0-9a-f]{16}")
SECRET_RE = re.compile(r"([0-9a-f]{16})_([A-Za-z0-9_-]{32})")

_COLUMNS = (
    "id, kind, wait_id, digest, label, created_at, created_by, expires_at, used_at, decision, revoked_at"
)
# One link by its id (the primary key).
SQL_LINK = f"SELECT {_COLUMNS} FROM atfg_wait_links WHERE id = ?"
# The links of one wait, oldest first (atfg_wait_links_by_wait).
SQL_LINKS_OF = f"SELECT {_COLUMNS} FROM atfg_wait_links WHERE wait_id = ? ORDER BY created_at"
SQL_INSERT_LINK = """
INSERT INTO atfg_wait_links (id, kind, wait_id, digest, label, created_at, created_by, expires_at)
VALUES (?, ?, ?, ?, ?, ?, ?, ?)
"""
# Use a decision link: one winner, and only while it is live (the primary key).
SQL_USE_LINK = """
UPDATE atfg_wait_links SET used_at = ?, decision = ?
WHERE id = ? AND used_at IS NULL AND revoked_at IS NULL AND expires_at > ?
"""
SQL_REVOKE_LINK = "UPDATE atfg_wait_links SET revoked_at = ? WHERE id = ? AND revoked_at IS NULL"
# The server's signing key (the primary key); created once, the first writer wins.
SQL_SERVER_KEY = "SELECT secret FROM atfg_server_keys WHERE name = ?"
SQL_INSERT_SERVER_KEY = (
    "INSERT INTO atfg_server_keys (name, secret) VALUES (?, ?) ON CONFLICT (name) DO NOTHING"
)
WEBHOOK_KEY = "webhook"


#: How far a signed request's timestamp may be from the server's clock, in seconds (a replay of
#: a captured request is refused after that; within it, the resumption is idempotent anyway).
SIGNATURE_TOLERANCE = 300


def sign(secret: str, timestamp: str, body: bytes) -> str:
    """The hex HMAC-SHA256 of ``<timestamp>.<body>`` keyed by a webhook's ``secret``."""
    return hmac.new(secret.encode(), timestamp.encode() + b"." + body, hashlib.sha256).hexdigest()


def digest(secret: str) -> bytes:
    return hashlib.sha256(secret.encode()).digest()


def new_secret() -> tuple[str, str]:
    """A link's id and its secret (which contains the id, the lookup key)."""
    link_id = secrets.token_hex(8)
    return link_id, f"{link_id}_{secrets.token_urlsafe(24)}"


@dataclass(frozen=True, slots=True)
class Link:
    id: str
    kind: LinkKind
    wait_id: str
    label: str | None
    created_at: float
    created_by: str
    expires_at: float
    used_at: float | None
    decision: str | None
    revoked_at: float | None

    def state(self, now: float) -> LinkState:
        if self.revoked_at is not None:
            return LinkState.REVOKED
        if self.used_at is not None:
            return LinkState.USED
        if self.expires_at <= now:
            return LinkState.EXPIRED
        return LinkState.LIVE

    @property
    def principal_name(self) -> str:
        """Who decides through this link, as ``decided_by`` and the audit trail name them."""
        return f"{'link' if self.kind is LinkKind.PAGE else 'webhook'}:{self.id}"

    def as_json(self, now: float | None = None) -> dict[str, Any]:
        view = {
            "id": self.id,
            "kind": self.kind.value,
            "wait_id": self.wait_id,
            "label": self.label,
            "state": self.state(time.time() if now is None else now).value,
            "created_at": self.created_at,
            "created_by": self.created_by,
            "expires_at": self.expires_at,
            "used_at": self.used_at,
            "decision": self.decision,
            "revoked_at": self.revoked_at,
        }
        return stamped(view, "created_at", "expires_at", "used_at", "revoked_at")


def _link(row: Row) -> Link:
    return Link(
        row["id"], LinkKind(row["kind"]), row["wait_id"], row["label"], row["created_at"],
        row["created_by"], row["expires_at"], row["used_at"], row["decision"], row["revoked_at"],
    )  # fmt: skip


def check_label(label: str | None) -> str | None:
    """A link's label (whom it was sent to, say), or ValueError."""
    if label is None:
        return None
    if not isinstance(label, str) or len(label) > MAX_LABEL or not is_text(label):
        raise ValueError(
            f"a link's label is at most {MAX_LABEL} characters, none of them control or invisible"
        )
    return label.strip() or None


def write_link(
    conn: Conn,
    kind: LinkKind,
    link_id: str,
    secret: str,
    wait_id: str,
    created_by: str,
    now: float,
    expires_at: float,
    label: str | None,
    audit: AuditEntry,
) -> Link:
    """Insert a link created at ``now`` that expires at ``expires_at``, and its audit entry
    (whose detail gains the link's id), in the caller's transaction: a minted link's, or the
    approval's that asked for one as it was created."""
    stored = digest(secret) if kind is LinkKind.PAGE else None
    conn.execute(SQL_INSERT_LINK, (link_id, kind.value, wait_id, stored, label, now, created_by, expires_at))
    detail = {**(audit.detail or {}), "link_id": link_id, "kind": kind.value, "expires_at": expires_at}
    write_audit(conn, AuditEntry(audit.principal, audit.action, audit.target, audit.outcome, detail), now)
    found = _row(conn, SQL_LINK, (link_id,))
    assert found is not None
    return _link(found)


class WaitLinks:
    """The links table on the server's database."""

    def __init__(self, db: GroupCommitWriter[Any]) -> None:
        self.db = db
        self._keys: dict[str, bytes] = {}

    async def mint(
        self,
        kind: LinkKind,
        wait_id: str,
        created_by: str,
        expires_in: float,
        label: str | None,
        audit: AuditEntry,
    ) -> tuple[Link, str]:
        """Create a link on ``wait_id`` and record ``audit`` (its detail gains the link's id) in
        the same transaction. Returns the link and its secret: the decision link's (only its
        digest is stored) or the webhook's signing secret. Shown once."""
        link_id, secret = new_secret()
        now = time.time()
        if kind is LinkKind.WEBHOOK:
            secret = await self.webhook_secret(link_id)

        def tx(conn: Conn) -> Link:
            return write_link(
                conn, kind, link_id, secret, wait_id, created_by, now, now + expires_in, label, audit
            )

        return await self.db.write(tx), secret

    def get(self, link_id: str) -> Link:
        found = _row(self.db.reader(), SQL_LINK, (link_id,)) if LINK_ID_RE.fullmatch(link_id) else None
        if found is None:
            raise NotFound.of("link", link_id)
        return _link(found)

    def of_wait(self, wait_id: str) -> list[Link]:
        return [_link(r) for r in _rows(self.db.reader(), SQL_LINKS_OF, (wait_id,))]

    def by_secret(self, secret: str) -> Link | None:
        """The decision link a secret names, or None (malformed, unknown, wrong). Its state is
        the caller's to judge."""
        match = SECRET_RE.fullmatch(secret) if len(secret) < 100 else None
        if match is None:
            return None
        found = _row(self.db.reader(), SQL_LINK, (match.group(1),))
        if found is None or found["kind"] != LinkKind.PAGE or found["digest"] is None:
            return None
        if not hmac.compare_digest(bytes(found["digest"]), digest(secret)):
            return None
        return _link(found)

    @staticmethod
    def use(conn: Conn, link: Link, decision: str, now: float) -> None:
        """Mark a decision link used, in the caller's transaction (the decision's); refuses one
        that was used, revoked or expired since it was read (``link_used``)."""
        if conn.execute(SQL_USE_LINK, (now, decision, link.id, now)).rowcount != 1:
            raise Conflict(f"decision link {link.id!r} was already used, revoked or expired", "link_used")

    async def revoke(self, link_id: str, audit: AuditEntry) -> Link:
        """Revoke a link (revoking one already revoked changes nothing); audited."""
        self.get(link_id)

        def tx(conn: Conn) -> Link:
            now = time.time()
            revoked = conn.execute(SQL_REVOKE_LINK, (now, link_id)).rowcount == 1
            write_audit(
                conn, AuditEntry(audit.principal, audit.action, link_id, "allowed", {"revoked": revoked}), now
            )
            found = _row(conn, SQL_LINK, (link_id,))
            assert found is not None
            return _link(found)

        return await self.db.write(tx)

    # -- webhook signatures ---------------------------------------------------------------------

    async def verify_webhook(
        self, link_id: str, timestamp: str | None, signature: str | None, body: bytes, now: float
    ) -> Link | None:
        """The webhook a request names when its signature is valid, else None (unknown webhook,
        missing or malformed headers, a timestamp more than :data:`SIGNATURE_TOLERANCE` seconds
        away, a wrong signature). The signature is ``sha256=`` and the hex HMAC-SHA256, keyed by
        the webhook's secret, of ``<timestamp>.<body>``; compared in constant time."""
        if not LINK_ID_RE.fullmatch(link_id) or not timestamp or not signature:
            return None
        if not timestamp.isdigit() or len(timestamp) > 12 or abs(now - int(timestamp)) > SIGNATURE_TOLERANCE:
            return None
        found = _row(self.db.reader(), SQL_LINK, (link_id,))
        if found is None or found["kind"] != LinkKind.WEBHOOK:
            return None
        secret = await self.webhook_secret(link_id)
        expected = "sha256=" + sign(secret, timestamp, body)
        if not hmac.compare_digest(expected.encode(), signature.strip().encode("utf-8", "replace")):
            return None
        return _link(found)

    async def webhook_secret(self, link_id: str) -> str:
        """The signing secret of webhook ``link_id``: HMAC-SHA256(server key, id), hex."""
        key = self._keys.get(WEBHOOK_KEY)
        if key is None:
            key = await self._server_key(WEBHOOK_KEY)
        return "whsec_" + hmac.new(key, link_id.encode(), hashlib.sha256).hexdigest()

    async def _server_key(self, name: str) -> bytes:
        def tx(conn: Conn) -> bytes:
            conn.execute(SQL_INSERT_SERVER_KEY, (name, secrets.token_bytes(32)))
            found = _row(conn, SQL_SERVER_KEY, (name,))
            assert found is not None
            return bytes(found["secret"])

        found = _row(self.db.reader(), SQL_SERVER_KEY, (name,))
        key = bytes(found["secret"]) if found is not None else await self.db.write(tx)
        self._keys[name] = key
        return key


__all__ = [
    "DEFAULT_LINK_SECONDS",
    "MAX_LINK_SECONDS",
    "SIGNATURE_TOLERANCE",
    "Link",
    "LinkKind",
    "LinkState",
    "WaitLinks",
    "check_label",
    "new_secret",
    "sign",
    "write_link",
]
