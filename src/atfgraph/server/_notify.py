"""Notifications: when a wait a person answers is created (an approval, a hook, a step hook), POST
a JSON event to each endpoint the server is configured with (``--notify URL``, repeatable, or
``$ATFGRAPH_NOTIFY``), and, for a traverser's approval, to the endpoints of its node
(``--notify-node NODE=URL``, repeatable, or ``$ATFGRAPH_NOTIFY_NODES``): a team that owns a
node hears of its own approvals only, while the server's endpoints hear of every wait.

The outbox row is written by a trigger in the transaction that creates the wait (atfgraph
migration sqlite 0008, postgres 0009), whichever store creates it, so an event exists exactly
when its wait committed. This notifier, a background task of the server, expands each outbox row
into one delivery per endpoint and posts the due deliveries, outside every run's path: a slow or
dead endpoint delays nothing but its own notifications. Every attempt is recorded (``attempts``,
``next_at``, ``last_error``); a failed one is retried after an exponential back-off, and after
``max_attempts`` the delivery is dead: the dead-letter list (``GET /api/v2/notifications?status=
dead``, the console's Notifications page).

A delivery is claimed before it is sent (its ``next_at`` moved past the request's timeout), so
servers sharing a PostgreSQL database do not send it twice; one whose server died mid-request is
sent again when that claim runs out (at least once, never lost).
"""

from __future__ import annotations

import asyncio
import logging
import time
import uuid
from collections.abc import Sequence
from dataclasses import dataclass
from typing import Any

import httpx
import orjson

from pyworkflow.store import GroupCommitWriter

from ._errors import database_unavailable
from ._graph_rows import Conn, _row, _rows
from ._paging import Key, keyset
from ._stamps import stamped

log = logging.getLogger("atfgraph.server")

#: Outbox rows expanded, and deliveries claimed and sent, per transaction of a pass.
BATCH = 50
#: Transactions a pass goes on with while each found a full batch: a pass keeps up with up to
#: this many batches every ``poll_seconds`` (a pass of one batch drained 100 events a second,
#: fewer than a busy server's approvals create), without holding the writer for long at a time.
PASS_BATCHES = 20
MAX_BACKOFF = 3600.0
MAX_ERROR = 500
DELIVERY_STATUSES = ("pending", "delivered", "dead")

# New outbox rows, oldest first (the primary key), each with its run's node (NULL: a pyworkflow
# run's wait, or a wait gone meanwhile; primary keys of waits and runs).
SQL_EVENTS = """
SELECT atfg_wait_events.seq, atfg_wait_events.wait_id, atfg_wait_events.created_at, r.node_id
FROM atfg_wait_events LEFT JOIN waits w ON w.id = atfg_wait_events.wait_id LEFT JOIN runs r ON r.id = w.run_id
ORDER BY atfg_wait_events.seq LIMIT ?
"""


def sql_drop_events(count: int) -> str:
    """Delete ``count`` outbox rows by seq, in one statement (by the ones read, not a range: on
    PostgreSQL a lower seq may commit after a higher one was read)."""
    return f"DELETE FROM atfg_wait_events WHERE seq IN ({', '.join('?' * count)})"


SQL_INSERT_DELIVERY = """
INSERT INTO atfg_deliveries (id, wait_id, endpoint, status, attempts, next_at, created_at)
VALUES (?, ?, ?, 'pending', 0, ?, ?)
"""
# Due deliveries, by time (the partial index atfg_deliveries_due).
SQL_DUE = """
SELECT id, wait_id, endpoint, attempts, next_at FROM atfg_deliveries
WHERE status = 'pending' AND next_at <= ? ORDER BY next_at LIMIT ?
"""
# Whether a pass has anything to do by a time: an event in the outbox (its first row by seq) or
# a delivery due (the first entry of atfg_deliveries_due); an idle server's pass is this one read.
SQL_NOTIFY_DUE = """
SELECT (SELECT seq FROM atfg_wait_events ORDER BY seq LIMIT 1) IS NOT NULL,
    (SELECT next_at FROM atfg_deliveries WHERE status = 'pending' AND next_at <= ? ORDER BY next_at LIMIT 1)
    IS NOT NULL
"""
# Claim one: only if no other server moved it meanwhile (the primary key).
SQL_CLAIM = "UPDATE atfg_deliveries SET next_at = ? WHERE id = ? AND status = 'pending' AND next_at = ?"
SQL_DELIVERED = """
UPDATE atfg_deliveries SET status = 'delivered', attempts = attempts + 1, delivered_at = ?, last_error = NULL
WHERE id = ?
"""
SQL_FAILED = (
    "UPDATE atfg_deliveries SET status = ?, attempts = attempts + 1, next_at = ?, last_error = ? WHERE id = ?"
)
_DELIVERY_COLUMNS = "id, wait_id, endpoint, status, attempts, next_at, last_error, created_at, delivered_at"
# One status's deliveries, newest first, then by id (atfg_deliveries_by_status); ``{where}`` is
# the cursor's condition, ``{order}`` its order (``_paging.keyset``).
SQL_DELIVERIES = (
    f"SELECT {_DELIVERY_COLUMNS} FROM atfg_deliveries" + " WHERE status = ?{where}{order} LIMIT ?"
)
# The wait an event announces, with its run (primary keys).
SQL_WAIT = """
SELECT w.id, w.kind, w.name, w.run_id, w.prompt, w.created_at, w.expires_at, w.status,
       r.workflow, r.node_id
FROM waits w JOIN runs r ON r.id = w.run_id WHERE w.id = ?
"""


@dataclass(frozen=True, slots=True)
class NotifySettings:
    #: the server's endpoints: every created wait is announced to each
    endpoints: tuple[str, ...] = ()
    #: (node, endpoint) pairs: a node's traversers' waits are also announced to its endpoints
    node_endpoints: tuple[tuple[str, str], ...] = ()
    max_attempts: int = 8
    #: the first retry's delay; each later one doubles it (at most MAX_BACKOFF)
    backoff_seconds: float = 2.0
    timeout_seconds: float = 10.0
    poll_seconds: float = 0.5


def check_endpoint(url: str) -> str:
    """An endpoint URL as configured, or ValueError."""
    if not url.startswith(("http://", "https://")) or len(url) > 2000 or any(c.isspace() for c in url):
        raise ValueError(f"a notification endpoint is an http:// or https:// URL, not {url!r}")
    return url


def check_node_endpoint(value: str) -> tuple[str, str]:
    """A ``NODE=URL`` pair as configured (``--notify-node``), or ValueError."""
    node, sep, url = value.partition("=")
    node = node.strip()
    if not sep or not node or len(node) > 200 or not node.isprintable():
        raise ValueError(
            f"a node's notification endpoint is NODE=URL (say refunds=https://...), not {value!r}"
        )
    return node, check_endpoint(url.strip())


def endpoints_for(settings: NotifySettings, node_id: str | None) -> tuple[str, ...]:
    """Where an event of a wait on ``node_id`` (None: a pyworkflow run's) goes: the server's
    endpoints, then the node's, each once."""
    extra = (url for node, url in settings.node_endpoints if node_id is not None and node == node_id)
    return tuple(dict.fromkeys((*settings.endpoints, *extra)))


def delivery_view(row: Any) -> dict[str, Any]:
    view = {name: row[name] for name in _DELIVERY_COLUMNS.split(", ")}
    return stamped(view, "next_at", "created_at", "delivered_at")


def backoff(settings: NotifySettings, attempts: int) -> float:
    """The delay after the ``attempts``-th failed attempt."""
    return float(min(settings.backoff_seconds * 2 ** (attempts - 1), MAX_BACKOFF))


def _text(wait: Any, public_url: str) -> str:
    """The Slack-compatible summary line of an event."""
    where = wait["workflow"] or wait["run_id"]
    if wait["kind"] == "approval":
        prompt = orjson.loads(wait["prompt"]) if wait["prompt"] is not None else None
        question = prompt.get("question") if isinstance(prompt, dict) else prompt
        what = f"Approval requested on {where}"
        if question is not None:
            what += f": {str(question)[:300]}"
    else:
        what = f"Hook {wait['name']!r} waits on {where}"
    return f"{what} ({public_url}/runs/{wait['run_id']})"


def event_body(wait: Any, public_url: str) -> bytes:
    """The JSON body POSTed for a created wait."""
    prompt = None if wait["prompt"] is None else orjson.Fragment(bytes(wait["prompt"]))
    return orjson.dumps(
        {
            "event": "wait.created",
            "text": _text(wait, public_url),
            "wait": {
                "id": wait["id"],
                "kind": wait["kind"],
                "name": wait["name"],
                "run_id": wait["run_id"],
                "workflow": wait["workflow"],
                "node_id": wait["node_id"],
                "prompt": prompt,
                "created_at": wait["created_at"],
                "expires_at": wait["expires_at"],
            },
            "console_url": f"{public_url}/runs/{wait['run_id']}",
        }
    )


class Notifier:
    """The outbox's deliverer, run by the server beside its sweeper."""

    def __init__(self, db: GroupCommitWriter[Any], settings: NotifySettings, public_url: str) -> None:
        self.db = db
        self.settings = settings
        self.public_url = public_url.rstrip("/")
        self._http: httpx.AsyncClient | None = None

    def list(self, status: str, limit: int, after: Key | None = None) -> list[dict[str, Any]]:
        """Deliveries in ``status``, newest first, after the cursor's ``(created_at, id)``."""
        cond, params, order = keyset(("created_at", "id"), True, after)
        sql = SQL_DELIVERIES.format(where=cond, order=order)
        return [delivery_view(r) for r in _rows(self.db.reader(), sql, (status, *params, limit))]

    async def run_forever(self) -> None:
        async with httpx.AsyncClient(timeout=self.settings.timeout_seconds) as http:
            self._http = http
            while True:
                try:
                    await self.pass_once()
                except Exception as exc:  # keep delivering; one bad pass must not stop them for good
                    if (down := database_unavailable(exc)) is not None:
                        log.warning("notifications skipped: %s", down.message)
                    else:
                        log.exception("notification pass failed")
                await asyncio.sleep(self.settings.poll_seconds)

    async def pass_once(self) -> int:
        """Expand new events and claim the due deliveries in one transaction on the writer (the
        readers of the request threads see nothing of it), then send them, and again while a
        batch was full (at most :data:`PASS_BATCHES` times); returns how many were sent. With
        nothing to do (:data:`SQL_NOTIFY_DUE`, a statement on the writer) the pass is that one
        read, not a transaction every ``poll_seconds``."""
        sent = 0
        for _ in range(PASS_BATCHES):  # on while a batch was full (at most PASS_BATCHES)
            due = await self.db.submit(SQL_NOTIFY_DUE, (time.time(),), "")
            if not any(due[0]):
                break

            def tx(conn: Conn) -> tuple[int, Sequence[Any]]:
                now = time.time()
                return self._expand(conn, now), self._claim(conn, now)

            expanded, claimed = await self.db.write(tx)
            await asyncio.gather(*(self._send(d) for d in claimed))
            sent += len(claimed)
            if expanded < BATCH and len(claimed) < BATCH:
                break
        return sent

    def _expand(self, conn: Conn, now: float) -> int:
        """Turn up to BATCH outbox rows into deliveries and delete them; how many there were."""
        events = _rows(conn, SQL_EVENTS, (BATCH,))
        for event in events:
            for endpoint in endpoints_for(self.settings, event["node_id"]):
                conn.execute(SQL_INSERT_DELIVERY, (uuid.uuid4().hex, event["wait_id"], endpoint, now, now))
        if events:
            conn.execute(sql_drop_events(len(events)), tuple(event["seq"] for event in events))
        return len(events)

    def _claim(self, conn: Conn, now: float) -> Sequence[Any]:
        until = now + self.settings.timeout_seconds + 5
        claimed = []
        for row in _rows(conn, SQL_DUE, (now, BATCH)):
            if conn.execute(SQL_CLAIM, (until, row["id"], row["next_at"])).rowcount == 1:
                wait = _row(conn, SQL_WAIT, (row["wait_id"],))
                claimed.append({"id": row["id"], "wait": None if wait is None else dict(wait),
                                "endpoint": row["endpoint"], "attempts": row["attempts"]})  # fmt: skip
        return claimed

    async def _send(self, delivery: dict[str, Any]) -> None:
        assert self._http is not None
        error: str | None = None
        wait = delivery["wait"]
        if wait is None:
            error = "the wait no longer exists"
        else:
            try:
                answer = await self._http.post(
                    delivery["endpoint"],
                    content=event_body(wait, self.public_url),
                    headers={"content-type": "application/json", "user-agent": "atfgraph-notifier"},
                )
                if not 200 <= answer.status_code < 300:
                    error = f"HTTP {answer.status_code}: {answer.text[:200]}"
            except httpx.HTTPError as exc:
                error = f"{type(exc).__name__}: {exc}"[:MAX_ERROR] or type(exc).__name__
        now = time.time()
        if error is None:
            await self.db.write(lambda c: c.execute(SQL_DELIVERED, (now, delivery["id"])))
            return
        attempts = delivery["attempts"] + 1
        dead = attempts >= self.settings.max_attempts or wait is None
        status = "dead" if dead else "pending"
        next_at = now if dead else now + backoff(self.settings, attempts)
        message = error[:MAX_ERROR]
        log.warning(
            "notification %s to %s failed (attempt %d): %s",
            delivery["id"],
            delivery["endpoint"],
            attempts,
            message,
        )
        await self.db.write(lambda c: c.execute(SQL_FAILED, (status, next_at, message, delivery["id"])))


__all__ = [
    "DELIVERY_STATUSES",
    "Notifier",
    "NotifySettings",
    "check_endpoint",
    "check_node_endpoint",
    "endpoints_for",
    "event_body",
]
