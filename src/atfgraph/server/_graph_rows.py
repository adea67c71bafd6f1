"""Rows of the graph store as the API shows them (JSON views: stored bytes stay bytes, embedded as
orjson fragments), the records a worker reports, and the statement helpers that read rows of
either dialect by column name."""

from __future__ import annotations

import sqlite3
import uuid
from collections.abc import Sequence
from dataclasses import dataclass
from typing import Any, NamedTuple

from pyworkflow.store import StepStatus

from .._json import fragment
from ._stamps import stamped

#: A row of either dialect: ``sqlite3.Row`` or the PostgreSQL database's row (both index by
#: position and by column name).
Row = Any
#: A connection of either dialect (``sqlite3.Connection`` or the PostgreSQL database's).
Conn = Any


class Lease(NamedTuple):
    """A task lease as a request names it: the traverser, the epoch of its live lease and the
    worker holding it (a worker names itself; an owner's request may leave it out)."""

    traverser_id: str
    epoch: int
    worker_id: str | None = None


#: A child step's status as the API reports it <-> as the engine records it.
STEP_STATUS_OUT = {StepStatus.COMPLETED.value: "succeeded", StepStatus.FAILED.value: "failed"}
STEP_STATUS_IN = {"succeeded": StepStatus.COMPLETED.value, "failed": StepStatus.FAILED.value}


def _cursor(conn: Conn, sql: str, params: Sequence[Any]) -> Any:
    if isinstance(conn, sqlite3.Connection):
        cur = conn.cursor()
        cur.row_factory = sqlite3.Row
        return cur.execute(sql, params)
    return conn.execute(sql, params)  # PostgreSQL rows answer to names already


def _rows(conn: Conn, sql: str, params: Sequence[Any] = ()) -> list[Row]:
    rows: list[Row] = _cursor(conn, sql, params).fetchall()
    return rows


def _row(conn: Conn, sql: str, params: Sequence[Any] = ()) -> Row | None:
    return _cursor(conn, sql, params).fetchone()


def new_id() -> str:
    return uuid.uuid4().hex


# -- JSON views (bytes stay bytes: embedded as fragments) --------------------------------------


def traverser_view(row: Row) -> dict[str, Any]:
    view = {
        "id": row["id"],
        "target": row["target"],
        "node_id": row["node_id"],
        "version": row["version"],
        "status": row["status"],
        "attempt": row["attempt"],
        "max_attempts": row["max_attempts"],
        "input": fragment(row["input"]),
        "result": fragment(row["result"]),
        "error": fragment(row["error"]),
        "waiting_on": row["waiting_on"],
        "created_at": row["created_at"],
        "updated_at": row["updated_at"],
        "finished_at": row["finished_at"],
    }
    return stamped(view, "created_at", "updated_at", "finished_at")


def approval_view(row: Row) -> dict[str, Any]:
    view = {
        "id": row["id"],
        "traverser_id": row["traverser_id"],
        "operation_key": row["operation_key"],
        "status": row["status"],
        "prompt": fragment(row["prompt"]),
        "checkpoint": fragment(row["checkpoint"]),
        "decided_by": row["decided_by"],
        "response": fragment(row["response"]),
        "created_at": row["created_at"],
        "expires_at": row["expires_at"],
        "decided_at": row["decided_at"],
        "response_schema": fragment(row["response_schema"]),
    }
    return stamped(view, "created_at", "expires_at", "decided_at")


def step_view(row: Row) -> dict[str, Any]:
    return {
        "key": row["step_key"],
        "seq": row["seq"],
        "target": row["target"],
        "status": STEP_STATUS_OUT.get(row["status"], row["status"]),
        "attempt": row["attempt"],
        "result": fragment(row["result"]),
        "error": fragment(row["error"]),
    }


def worker_view(row: Row) -> dict[str, Any]:
    view = {
        "id": row["id"],
        "node_id": row["node_id"],
        "version": row["version"],
        "capacity": row["capacity"],
        "stats": fragment(row["stats"]),
        "registered_at": row["registered_at"],
        "last_seen": row["last_seen"],
    }
    return stamped(view, "registered_at", "last_seen")


@dataclass(slots=True)
class StepRecord:
    """A child step the worker reports with its next write (saves a round trip per step)."""

    key: str
    seq: int
    target: str
    status: str
    result: bytes | None
    error: bytes | None


@dataclass(slots=True)
class SweepOutcome:
    """What the sweeper changed: the nodes to wake and the traversers whose watchers to wake."""

    nodes: set[str]
    traversers: set[str]
