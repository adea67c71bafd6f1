"""Identity and access: principals, roles, bearer tokens and the audit trail.

Roles and what they may do (the permission each route requires is declared beside the route)::

    permission  owner  administrator  reviewer  worker
    read          x         x            x
    submit        x         x
    decide        x         x            x
    work          x         x                      x    claim, heartbeat, checkpoints, approvals
    administer    x         x                           tokens (only an owner mints owners)

Tokens are ``atfg_<id>_<secret>``: 64 random bits of public id (the lookup key) and 192 bits of
secret. Only the SHA-256 digest of the whole token is stored; it is compared in constant time.
"""

from __future__ import annotations

import asyncio
import hashlib
import hmac
import json
import logging
import os
import re
import secrets
import time
from dataclasses import dataclass, replace
from enum import StrEnum
from pathlib import Path
from typing import Any

import orjson

from pyworkflow.store import GroupCommitWriter, Migration, SQLiteDatabase, load_migrations

from .._credentials import CREDENTIALS_FILE
from ._body import is_text
from ._stamps import iso, stamped

log = logging.getLogger("atfgraph.server.identity")


class Role(StrEnum):
    OWNER = "owner"
    ADMINISTRATOR = "administrator"
    REVIEWER = "reviewer"
    WORKER = "worker"


class Permission(StrEnum):
    READ = "read"
    SUBMIT = "submit"
    DECIDE = "decide"
    WORK = "work"
    ADMINISTER = "administer"


ROLE_PERMISSIONS: dict[Role, frozenset[Permission]] = {
    Role.OWNER: frozenset(Permission),
    Role.ADMINISTRATOR: frozenset(Permission),
    Role.REVIEWER: frozenset({Permission.READ, Permission.DECIDE}),
    Role.WORKER: frozenset({Permission.WORK}),
}

#: Tokens whose rows the verification cache holds at most (it starts over when full).
_TOKEN_CACHE_MAX = 10_000
TOKEN_RE = re.compile(r"atfg_([0-9a-f]{16})_([A-Za-z0-9_-]{32})")
MAX_NAME = 100


def identity_migrations(dialect: str = "sqlite") -> list[Migration]:
    return load_migrations("atfgraph.server.identity_migrations", dialect, "atfgraph_identity")


@dataclass(frozen=True, slots=True)
class Principal:
    """Who is calling: the token's id and name, and its role."""

    id: str
    name: str
    role: Role

    def can(self, permission: Permission) -> bool:
        return permission in ROLE_PERMISSIONS[self.role]


ANONYMOUS = None  # no credential presented


@dataclass(frozen=True, slots=True)
class TokenInfo:
    id: str
    name: str
    role: Role
    created_at: float
    created_by: str | None
    last_used_at: float | None
    revoked_at: float | None

    def as_json(self) -> dict[str, Any]:
        view = {
            "id": self.id,
            "name": self.name,
            "role": self.role.value,
            "created_at": self.created_at,
            "created_by": self.created_by,
            "last_used_at": self.last_used_at,
            "revoked_at": self.revoked_at,
        }
        return stamped(view, "created_at", "last_used_at", "revoked_at")


class IdentityError(ValueError):
    """Bad input to token administration (unknown role, bad name, unknown id)."""


def _digest(token: str) -> bytes:
    return hashlib.sha256(token.encode()).digest()


def new_token() -> tuple[str, str]:
    token_id = secrets.token_hex(8)
    return token_id, f"atfg_{token_id}_{secrets.token_urlsafe(24)}"


# Look a token up by its public id (the primary key); the digest is compared afterwards.
SQL_TOKEN_BY_ID = "SELECT id, name, role, digest, revoked_at FROM atfg_tokens WHERE id = ?"
SQL_INSERT_TOKEN = """
INSERT INTO atfg_tokens (id, name, role, digest, created_at, created_by) VALUES (?, ?, ?, ?, ?, ?)
"""
SQL_LIST_TOKENS = """
SELECT id, name, role, created_at, created_by, last_used_at, revoked_at FROM atfg_tokens ORDER BY created_at
"""
SQL_REVOKE = "UPDATE atfg_tokens SET revoked_at = ? WHERE id = ? AND revoked_at IS NULL"
SQL_TOUCH = "UPDATE atfg_tokens SET last_used_at = ? WHERE id = ?"
SQL_COUNT_TOKENS = "SELECT COUNT(*) FROM atfg_tokens"
# PostgreSQL: servers sharing a new database that start at once take turns to mint the first
# credentials (the lock conflicts with itself and lasts to the end of the transaction); SQLite's
# writer already holds the file's write lock.
SQL_LOCK_TOKENS = "LOCK TABLE atfg_tokens IN SHARE ROW EXCLUSIVE MODE"
SQL_AUDIT = """
INSERT INTO atfg_audit (at, principal, role, action, target, outcome, detail) VALUES (?, ?, ?, ?, ?, ?, ?)
"""
# The trail of one target (atfg_audit_by_target), or everyone's, newest first, under the
# conditions given (``{where}``: action, outcome, time, and the cursor's id, ``{order}``).
SQL_LIST_AUDIT = (
    "SELECT id, at, principal, role, action, target, outcome, detail FROM atfg_audit"
    " WHERE 1 = 1{where}{order} LIMIT ?"
)


#: The bounds of one audit row (docs/operators.md, "Audit"): a target is cut to this many
#: characters (ids are at most 200, an API path with one id under 256) ...
MAX_AUDIT_TARGET = 256
#: ... and a detail whose JSON is longer than this many bytes (a large decision response or hook
#: payload, which the approval or the hook keeps whole) is recorded as a summary of it: its size
#: and its first _DETAIL_HEAD characters.
MAX_AUDIT_DETAIL = 16 * 1024
_DETAIL_HEAD = 1000
#: Characters no text column can hold (PostgreSQL refuses NUL; a lone surrogate is not UTF-8).
_UNSTORABLE = re.compile("[\x00\ud800-\udfff]")


def _storable(text: str, limit: int) -> str:
    """``text`` cut to ``limit`` characters, with what no text column can hold replaced."""
    text = text[:limit]
    return text if text.isascii() and "\x00" not in text else _UNSTORABLE.sub("\ufffd", text)


def _detail_json(detail: Any) -> bytes:
    """A detail as stored: its JSON, or a summary of it when that is over MAX_AUDIT_DETAIL bytes."""
    try:
        # orjson: details may embed stored JSON as fragments (a decision's response).
        data = orjson.dumps(detail, default=str)
    except orjson.JSONEncodeError:  # e.g. a string with a lone surrogate: recorded as its repr
        data = orjson.dumps({"unserializable": _storable(repr(detail), _DETAIL_HEAD)})
    if len(data) <= MAX_AUDIT_DETAIL:
        return data
    head = data[: _DETAIL_HEAD * 4].decode("utf-8", "ignore")[:_DETAIL_HEAD]
    return orjson.dumps({"truncated": True, "bytes": len(data), "head": head})


@dataclass(frozen=True, slots=True)
class AuditEntry:
    """One row of the audit trail: who did what to which target, and how it ended. A change's
    entry is written in the transaction of the change (:func:`write_audit`), so the trail never
    records a change that did not commit, nor misses one that did."""

    principal: Principal | None
    action: str
    target: str | None
    outcome: str
    detail: Any = None


def write_audit(conn: Any, entry: AuditEntry, now: float) -> None:
    """Append ``entry`` on ``conn``, inside the caller's transaction, within the bounds of a row
    (:data:`MAX_AUDIT_TARGET`, :data:`MAX_AUDIT_DETAIL`): no input can make the insert fail."""
    conn.execute(SQL_AUDIT, (now, *audit_values(entry)))


def audit_values(entry: AuditEntry) -> tuple[str, str, str, str | None, str, bytes | None]:
    """The columns of ``entry``'s row after ``at`` (principal, role, action, target, outcome,
    detail), bounded and encoded as :func:`write_audit` stores them (PostgreSQL's server-side
    transitions take them as parameters)."""
    who = entry.principal
    return (
        who.name if who else "anonymous",
        who.role.value if who else "anonymous",
        entry.action,
        None if entry.target is None else _storable(entry.target, MAX_AUDIT_TARGET),
        entry.outcome,
        None if entry.detail is None else _detail_json(entry.detail),
    )


class AnonymousAuditLimit:
    """How often a denial without a credential is recorded: at most once per (action, client
    address) per ``interval`` seconds, and at most ``rows`` such rows per ``interval`` in all
    (addresses are cheap: a local caller has all of 127.0.0.0/8). The attempts not recorded are
    counted, and the next row recorded says how many there were. Per server process: each server
    sharing a PostgreSQL database keeps its own. A denial of a token (forbidden) is always
    recorded: the token is accountable, and can be revoked."""

    def __init__(self, interval: float = 10.0, rows: int = 10) -> None:
        self.interval = interval
        self.rows = rows
        self._last: dict[tuple[str, str], float] = {}
        self._window = float("-inf")
        self._written = 0
        #: attempts not recorded since the last row recorded
        self.suppressed = 0

    def admit(self, action: str, client: str | None, now: float) -> int | None:
        """None: do not record this attempt (it is counted). Otherwise record it, noting the
        returned number of attempts not recorded before it."""
        if now - self._window >= self.interval:
            self._window, self._written = now, 0
            # What is left holds at most the rows of the last window: memory stays bounded too.
            self._last = {k: t for k, t in self._last.items() if now - t < self.interval}
        key = (action, client or "unknown")
        last = self._last.get(key)
        if (last is not None and now - last < self.interval) or self._written >= self.rows:
            self.suppressed += 1
            return None
        self._last[key] = now
        self._written += 1
        skipped, self.suppressed = self.suppressed, 0
        return skipped


class Identity:
    """Token administration and verification on the server's database."""

    def __init__(self, db: GroupCommitWriter[Any], *, cache_seconds: float = 0.0) -> None:
        """``db``: the server's database (SQLite or PostgreSQL: ``write``, ``reader()``).
        ``cache_seconds``: how long a token's stored row is reused to verify requests (every
        request is verified; over a network a lookup per request costs a round trip). A
        revocation on this server takes effect at once, one on another server sharing the
        database within that time."""
        self.db = db
        self._touched: dict[str, float] = {}
        self.cache_seconds = cache_seconds
        self._rows: dict[str, tuple[float, Any]] = {}
        self.anonymous = AnonymousAuditLimit()
        self._touches: set[asyncio.Task[None]] = set()

    # -- administration -------------------------------------------------------------------------

    async def create_token(
        self, name: str, role: str, *, created_by: Principal | None, audit: AuditEntry | None = None
    ) -> tuple[TokenInfo, str]:
        """Mint a token; the raw token is returned once and never stored. ``audit`` is recorded
        with it (its target becomes the new token's id)."""
        if not isinstance(name, str) or not name.strip() or len(name) > MAX_NAME:
            raise IdentityError(f"a token name is 1 to {MAX_NAME} characters")
        if not is_text(name, blank=False):
            raise IdentityError("a token name must not contain control or invisible characters")
        try:
            role_ = Role(role)
        except ValueError:
            raise IdentityError(
                f"role must be one of {', '.join(r.value for r in Role)}, not {role!r}"
            ) from None
        if role_ is Role.OWNER and created_by is not None and created_by.role is not Role.OWNER:
            raise PermissionError("only an owner may create an owner token")
        token_id, raw = new_token()
        now = time.time()
        by = created_by.name if created_by else None

        def tx(conn: Any) -> None:
            conn.execute(SQL_INSERT_TOKEN, (token_id, name.strip(), role_.value, _digest(raw), now, by))
            if audit is not None:
                write_audit(conn, replace(audit, target=token_id), now)

        await self.db.write(tx)
        return TokenInfo(token_id, name.strip(), role_, now, by, None, None), raw

    async def list_tokens(self) -> list[TokenInfo]:
        rows = self.db.reader().execute(SQL_LIST_TOKENS).fetchall()
        return [TokenInfo(r[0], r[1], Role(r[2]), r[3], r[4], r[5], r[6]) for r in rows]

    async def revoke(self, token_id: str, audit: AuditEntry | None = None) -> bool:
        """Revoke a live token; False if it was already revoked. Unknown ids raise. ``audit`` is
        recorded with the revocation (its detail says whether this call revoked it)."""
        if not isinstance(token_id, str) or not re.fullmatch(r"[0-9a-f]{16}", token_id):
            raise IdentityError(f"no token {token_id!r}")

        def tx(conn: Any) -> bool:
            if conn.execute(SQL_TOKEN_BY_ID, (token_id,)).fetchone() is None:
                raise IdentityError(f"no token {token_id!r}")
            now = time.time()
            revoked = bool(conn.execute(SQL_REVOKE, (now, token_id)).rowcount == 1)
            if audit is not None:
                write_audit(conn, replace(audit, detail={"revoked": revoked}), now)
            return revoked

        try:
            return await self.db.write(tx)
        finally:
            self._rows.pop(token_id, None)

    def count(self) -> int:
        return int(self.db.reader().execute(SQL_COUNT_TOKENS).fetchone()[0])

    # -- verification ---------------------------------------------------------------------------

    def verify(self, token: str | None) -> Principal | None:
        """The live principal a bearer token names, or None (malformed, unknown, wrong, revoked)."""
        if not token or len(token) > 200:
            return None
        match = TOKEN_RE.fullmatch(token)
        if match is None:
            return None
        row = self._token_row(match.group(1))
        if row is None or not hmac.compare_digest(bytes(row[3]), _digest(token)) or row[4] is not None:
            return None
        return Principal(row[0], row[1], Role(row[2]))

    def principal_of(self, token_id: str) -> Principal | None:
        """The live principal of a token known by its id (a console session, which verified the
        whole token when it was opened); None when it is unknown or revoked."""
        row = self._token_row(token_id)
        if row is None or row[4] is not None:
            return None
        return Principal(row[0], row[1], Role(row[2]))

    def _token_row(self, token_id: str) -> Any:
        if self.cache_seconds <= 0:
            return self.db.reader().execute(SQL_TOKEN_BY_ID, (token_id,)).fetchone()
        now = time.monotonic()
        cached = self._rows.get(token_id)
        if cached is not None and now - cached[0] < self.cache_seconds:
            return cached[1]
        row = self.db.reader().execute(SQL_TOKEN_BY_ID, (token_id,)).fetchone()
        if len(self._rows) >= _TOKEN_CACHE_MAX:
            self._rows.clear()
        self._rows[token_id] = (now, row)
        return row

    async def touch(self, principal: Principal) -> None:
        """Record use, at most once a minute per token (an audit aid, not on the hot path: the
        write runs beside the request, so a read is not held up, nor refused, by a database that
        takes no writes; such a failure is logged and the next request tries again)."""
        now = time.time()
        if now - self._touched.get(principal.id, 0.0) < 60:
            return
        self._touched[principal.id] = now
        task = asyncio.ensure_future(self._touch(principal.id, now))
        self._touches.add(task)
        task.add_done_callback(self._touches.discard)

    async def _touch(self, token_id: str, now: float) -> None:
        try:
            await self.db.write(lambda c: c.execute(SQL_TOUCH, (now, token_id)))
        except Exception as exc:  # e.g. DatabaseUnavailableError: the request did not need it
            self._touched.pop(token_id, None)
            log.warning("could not record the use of token %s: %s", token_id, exc)

    # -- audit ----------------------------------------------------------------------------------

    async def audit(
        self,
        principal: Principal | None,
        action: str,
        *,
        target: str | None,
        outcome: str,
        detail: Any = None,
        client: str | None = None,
    ) -> None:
        """Record an attempt that changed nothing (a denial, a refusal) in a transaction of its own;
        a change records its entry in its own transaction instead (:class:`AuditEntry`). An
        attempt without a credential (``principal`` None) from the address ``client`` is recorded
        within the bounds of :attr:`anonymous` (:class:`AnonymousAuditLimit`)."""
        if principal is None:
            skipped = self.anonymous.admit(action, client, time.monotonic())
            if skipped is None:
                return
            if skipped:
                note = f"{skipped} earlier anonymous attempt{'s' if skipped != 1 else ''} not recorded"
                detail = f"{detail} ({note})" if isinstance(detail, str) else {"detail": detail, "note": note}
        entry = AuditEntry(principal, action, target, outcome, detail)
        await self.db.write(lambda conn: write_audit(conn, entry, time.time()))

    async def list_audit(
        self,
        *,
        target: str | None = None,
        limit: int = 100,
        action: str | None = None,
        outcome: str | None = None,
        since: float | None = None,
        until: float | None = None,
        after_id: int | None = None,
    ) -> list[dict[str, Any]]:
        """The audit trail newest first: of one ``target``, ``action`` and ``outcome``, in the
        time range given, below the cursor's ``after_id``."""
        where, params = "", list[Any]()
        for condition, value in (
            ("target = ?", target),
            ("action = ?", action),
            ("outcome = ?", outcome),
            ("at >= ?", since),
            ("at < ?", until),
            ("id < ?", after_id),
        ):
            if value is not None:
                where += f" AND {condition}"
                params.append(value)
        sql = SQL_LIST_AUDIT.format(where=where, order=" ORDER BY id DESC")
        rows = self.db.reader().execute(sql, (*params, limit)).fetchall()
        return [
            {
                "id": r[0],
                "at": r[1],
                "at_iso": iso(r[1]),
                "principal": r[2],
                "role": r[3],
                "action": r[4],
                "target": r[5],
                "outcome": r[6],
                "detail": json.loads(r[7]) if r[7] is not None else None,
            }
            for r in rows
        ]

    # -- first start ----------------------------------------------------------------------------

    async def bootstrap(self, home: Path, server_url: str, database: str = "") -> Path | None:
        """On an empty database, create an owner and a worker credential (in one transaction:
        of several servers starting at once on a new database, one mints them, the others
        none) and write them to a credentials file in ``home`` (mode 0600):
        ``credentials.json`` if there is none, else ``credentials-<owner token id>.json``. A
        credentials file that exists holds tokens of another database (this one has none): it
        is never overwritten. The file records the ``database`` it is for (redacted). Returns
        the file's path when one was written."""
        if self.count() > 0:
            return None
        (owner_id, owner), (worker_id, worker) = new_token(), new_token()
        now = time.time()
        postgres = not isinstance(self.db, SQLiteDatabase)

        def tx(conn: Any) -> bool:
            if postgres:
                conn.execute(SQL_LOCK_TOKENS)
            if int(conn.execute(SQL_COUNT_TOKENS).fetchone()[0]) > 0:
                return False  # another server sharing the database minted them first
            conn.execute(SQL_INSERT_TOKEN, (owner_id, "owner", Role.OWNER.value, _digest(owner), now, None))
            conn.execute(
                SQL_INSERT_TOKEN, (worker_id, "worker", Role.WORKER.value, _digest(worker), now, None)
            )
            return True

        if not await self.db.write(tx):
            return None
        data = {"server": server_url, "owner": owner, "worker": worker, "database": database}
        path = home / CREDENTIALS_FILE
        if not write_credentials(path, data, overwrite=False):
            path = home / f"credentials-{owner_id}.json"
            write_credentials(path, data)
        return path


def write_credentials(path: Path, data: dict[str, str], *, overwrite: bool = True) -> bool:
    """Write a credentials file only its owner can read (created 0600, never widened), in one
    step (a reader sees the whole file or none). ``overwrite`` False: leave a file already at
    ``path`` alone and return False."""
    path.parent.mkdir(parents=True, exist_ok=True)
    tmp = path.with_name(f".{path.name}.{secrets.token_hex(4)}.tmp")
    fd = os.open(tmp, os.O_WRONLY | os.O_CREAT | os.O_EXCL, 0o600)
    try:
        with os.fdopen(fd, "w") as fh:
            json.dump(data, fh, indent=2)
            fh.write("\n")
        os.chmod(tmp, 0o600)
        if overwrite:
            os.replace(tmp, path)
            return True
        try:
            os.link(tmp, path)  # fails if the file exists: no window in which it is overwritten
        except FileExistsError:
            return False
        return True
    finally:
        tmp.unlink(missing_ok=True)
