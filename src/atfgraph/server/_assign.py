"""Reviewer policies beyond the spec: an approval assigned to roles or named principals, and its
escalation when it falls due.

An assignment is written in the transaction that creates its approval (``GraphStore.
request_approval(also=...)``). Only an assigned principal (its token's name is listed, or its
role is) may decide it, or mint a decision link or webhook for it; everyone else who may read
approvals still sees it. With an escalation (the handler passed ``escalate``), the sweeper
re-assigns a pending approval when its escalation falls due (once) and gives it a new deadline;
an escalation that falls due after its approval was decided or cancelled is dropped by
the same sweep (it is shown as none from the decision on).

The escalation has its own deadline (``escalate_at``); the approval's wait is given the deadline
it has if the escalation comes on time (``escalate_at`` plus the escalation's seconds), so that
no sweep of the engine's (the graph server's, or a pyworkflow runtime's on the same database)
and no late decision can expire an approval that was to escalate first.
"""

from __future__ import annotations

from dataclasses import dataclass
from typing import Any

import orjson

from ._body import is_text
from ._body_schema import text
from ._graph_rows import Conn, _row, _rows
from ._identity import AuditEntry, Principal, Role, write_audit
from ._refusals import Invalid
from ._stamps import iso

MAX_ASSIGNEES = 50
#: The longest an escalation may wait (ten years, as an approval's expiry).
MAX_ESCALATION_SECONDS = 10 * 365 * 86400
NAME_MAX = 100

# One approval's assignment (the primary key), its escalation only while it can still come (the
# approval is pending): an escalation is dropped lazily (escalate_due), so the view does not wait.
SQL_ASSIGNMENT = """
SELECT a.wait_id, a.roles, a.principals, a.escalations,
    CASE WHEN w.status = 'pending' THEN a.escalate END AS escalate,
    CASE WHEN w.status = 'pending' THEN a.escalate_at END AS escalate_at
FROM atfg_assignments a LEFT JOIN waits w ON w.id = a.wait_id WHERE a.wait_id = ?
"""
SQL_INSERT_ASSIGNMENT = """
INSERT INTO atfg_assignments (wait_id, roles, principals, escalate, escalate_at, escalations)
VALUES (?, ?, ?, ?, ?, 0)
ON CONFLICT (wait_id) DO NOTHING
"""
SQL_WAIT_DEADLINE = "SELECT expires_at FROM waits WHERE id = ?"
# Pending approvals whose escalation fell due (atfg_assignments_escalating, then the waits'
# primary key).
SQL_DUE_ESCALATIONS = """
SELECT a.wait_id, a.escalate FROM atfg_assignments a JOIN waits w ON w.id = a.wait_id
WHERE a.escalate IS NOT NULL AND a.escalate_at <= ? AND w.status = 'pending' LIMIT ?
"""
# Escalations that fell due but can no longer come (their approval was decided or
# cancelled first), dropped a batch at a time: passed over instead, every sweep would read again
# every approval ever decided before its escalation.
SQL_DROP_DEAD_ESCALATIONS = """
UPDATE atfg_assignments SET escalate = NULL, escalate_at = NULL
WHERE wait_id IN (
    SELECT a.wait_id FROM atfg_assignments a LEFT JOIN waits w ON w.id = a.wait_id
    WHERE a.escalate IS NOT NULL AND a.escalate_at <= ? AND (w.status IS NULL OR w.status <> 'pending')
    LIMIT ?)
"""
SQL_EXTEND_WAIT = "UPDATE waits SET expires_at = ? WHERE id = ? AND status = 'pending'"
SQL_ESCALATE = """
UPDATE atfg_assignments SET roles = ?, principals = ?, escalate = NULL, escalate_at = NULL,
    escalations = escalations + 1
WHERE wait_id = ?
"""
#: Who escalates, as the audit trail names it.
ESCALATION = Principal("system", "system:escalation", Role.OWNER)


@dataclass(frozen=True, slots=True)
class Assignees:
    roles: tuple[str, ...]
    principals: tuple[str, ...]

    def allows(self, who: Principal) -> bool:
        return who.role.value in self.roles or who.name in self.principals

    def as_json(self) -> dict[str, Any]:
        return {"roles": list(self.roles), "principals": list(self.principals)}


@dataclass(frozen=True, slots=True)
class Escalation:
    to: Assignees
    expires_in_seconds: float


_NAMES = {"type": "array", "maxItems": MAX_ASSIGNEES, "items": text(NAME_MAX, 1)}
_ROLES = {
    "type": "array",
    "maxItems": MAX_ASSIGNEES,
    "items": {"enum": ["owner", "administrator", "reviewer"]},
}
#: What :func:`parse_assignees` accepts, for the OpenAPI document: roles and/or principals,
#: naming somebody.
ASSIGN_SCHEMA = {
    "type": "object",
    "properties": {
        "roles": {"anyOf": [_ROLES, {"type": "null"}]},
        "principals": {"anyOf": [_NAMES, {"type": "null"}]},
    },
    "additionalProperties": False,
    "anyOf": [
        {"properties": {"roles": {"type": "array", "minItems": 1}}, "required": ["roles"]},
        {"properties": {"principals": {"type": "array", "minItems": 1}}, "required": ["principals"]},
    ],
}
#: What :func:`parse_escalation` accepts.
ESCALATE_SCHEMA = {
    "type": "object",
    "properties": {
        "roles": {"anyOf": [_ROLES, {"type": "null"}]},
        "principals": {"anyOf": [_NAMES, {"type": "null"}]},
        "expires_in_seconds": {"type": "number", "exclusiveMinimum": 0, "maximum": MAX_ESCALATION_SECONDS},
    },
    "required": ["expires_in_seconds"],
    "additionalProperties": False,
    "anyOf": ASSIGN_SCHEMA["anyOf"],
}


def parse_assignees(value: Any, where: str) -> Assignees | None:
    """``{"roles": [...], "principals": [...]}`` (either may be absent), or None; Invalid."""
    if value is None:
        return None
    if not isinstance(value, dict) or set(value) - {"roles", "principals"}:
        raise Invalid(f"{where} must be an object with 'roles' and/or 'principals'", "validation_error")
    roles = _names(value.get("roles"), f"{where}.roles")
    bad = [r for r in roles if r not in {role.value for role in Role} - {Role.WORKER.value}]
    if bad:
        raise Invalid(
            f"{where}.roles: {bad[0]!r} is not owner, administrator or reviewer", "validation_error"
        )
    principals = _names(value.get("principals"), f"{where}.principals")
    if not roles and not principals:
        raise Invalid(f"{where} names nobody", "validation_error")
    return Assignees(roles, principals)


def parse_escalation(value: Any, where: str = "body.escalate") -> Escalation | None:
    """``{"roles", "principals", "expires_in_seconds"}``, or None; Invalid."""
    if value is None:
        return None
    if not isinstance(value, dict):
        raise Invalid(f"{where} must be an object", "validation_error")
    seconds = value.get("expires_in_seconds")
    if (
        isinstance(seconds, bool)
        or not isinstance(seconds, int | float)
        or not 0 < seconds <= MAX_ESCALATION_SECONDS
    ):
        raise Invalid(f"{where}.expires_in_seconds must be a positive number of seconds", "validation_error")
    to = parse_assignees({k: v for k, v in value.items() if k != "expires_in_seconds"}, where)
    assert to is not None
    return Escalation(to, float(seconds))


def _names(value: Any, where: str) -> tuple[str, ...]:
    if value is None:
        return ()
    if not isinstance(value, list) or len(value) > MAX_ASSIGNEES:
        raise Invalid(f"{where} must be a list of at most {MAX_ASSIGNEES} names", "validation_error")
    for item in value:
        if not isinstance(item, str) or not item or len(item) > NAME_MAX or not is_text(item):
            raise Invalid(
                f"{where} holds names of 1 to {NAME_MAX} characters, none of them control or invisible",
                "validation_error",
            )
    return tuple(dict.fromkeys(value))


def deadline_with(expires_in_seconds: float, escalate: Escalation | None) -> float:
    """The deadline to give an approval's wait that is to escalate after ``expires_in_seconds``:
    when it expires if the escalation comes on time (see the module's docstring)."""
    return expires_in_seconds + (0.0 if escalate is None else escalate.expires_in_seconds)


def write_assignment(conn: Conn, wait_id: str, to: Assignees | None, escalate: Escalation | None) -> None:
    """Record an approval's assignment (in the transaction that creates it, whose wait has the
    deadline :func:`deadline_with` gave it); a second request of the same approval keeps the
    first assignment."""
    if to is None:  # an escalation alone: anyone may decide until it escalates
        to = Assignees(("owner", "administrator", "reviewer"), ())
    esc = escalate_at = None
    if escalate is not None:
        esc = orjson.dumps(
            {**escalate.to.as_json(), "expires_in_seconds": escalate.expires_in_seconds}
        ).decode()
        deadline = _row(conn, SQL_WAIT_DEADLINE, (wait_id,))
        assert deadline is not None and deadline["expires_at"] is not None, "an escalation needs a deadline"
        escalate_at = float(deadline["expires_at"]) - escalate.expires_in_seconds
    roles, principals = orjson.dumps(list(to.roles)).decode(), orjson.dumps(list(to.principals)).decode()
    conn.execute(SQL_INSERT_ASSIGNMENT, (wait_id, roles, principals, esc, escalate_at))


def read_assignment(conn: Conn, wait_id: str) -> dict[str, Any] | None:
    """An approval's assignment as the API shows it, or None (anyone who may decide may)."""
    row = _row(conn, SQL_ASSIGNMENT, (wait_id,))
    if row is None:
        return None
    return {
        "roles": orjson.loads(row["roles"]),
        "principals": orjson.loads(row["principals"]),
        "escalate": None if row["escalate"] is None else orjson.loads(row["escalate"]),
        "escalates_at": row["escalate_at"],
        "escalates_at_iso": iso(row["escalate_at"]),
        "escalations": row["escalations"],
    }


def assignees_of(conn: Conn, wait_id: str) -> Assignees | None:
    found = read_assignment(conn, wait_id)
    return None if found is None else Assignees(tuple(found["roles"]), tuple(found["principals"]))


def escalate_due(conn: Conn, limit: int, now: float) -> int:
    """Re-assign the pending approvals that fell due by ``now`` and have an escalation, each with
    its new deadline, audited, after dropping up to ``limit`` escalations that fell due but can no
    longer come (nothing to audit). Returns how many it settled: asked again while that is
    ``limit`` or more. The sweeper runs it before it expires what fell due by the same ``now``,
    so an escalation always goes ahead of its approval's expiry."""
    settled: int = conn.execute(SQL_DROP_DEAD_ESCALATIONS, (now, limit)).rowcount
    for row in _rows(conn, SQL_DUE_ESCALATIONS, (now, limit)):
        esc = orjson.loads(row["escalate"])
        if conn.execute(SQL_EXTEND_WAIT, (now + esc["expires_in_seconds"], row["wait_id"])).rowcount != 1:
            continue
        roles, principals = orjson.dumps(esc["roles"]).decode(), orjson.dumps(esc["principals"]).decode()
        conn.execute(SQL_ESCALATE, (roles, principals, row["wait_id"]))
        entry = AuditEntry(ESCALATION, "approval.escalate", row["wait_id"], "allowed", esc)
        write_audit(conn, entry, now)
        settled += 1
    return settled


__all__ = [
    "Assignees",
    "Escalation",
    "assignees_of",
    "deadline_with",
    "escalate_due",
    "parse_assignees",
    "parse_escalation",
    "read_assignment",
    "write_assignment",
]
