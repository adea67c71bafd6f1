"""The rule of a live task lease and the recording of a handler's child steps: what every
transition made under a lease checks and writes first (the graph store's transitions on SQLite,
and PostgreSQL's fallbacks to them)."""

from __future__ import annotations

from collections.abc import Sequence

from .._models import TraverserStatus
from ._graph_rows import STEP_STATUS_IN, Conn, Row, StepRecord, _row
from ._graph_sql import SQL_INSERT_STEP, SQL_LOCK_TRAVERSER
from ._refusals import LeaseLost, NotFound


def live_row(row: Row | None, traverser_id: str, epoch: int, now: float) -> Row:
    """The rule of a live lease, for every write and read made under one: the traverser is
    running, ``epoch`` is its queue row's and the lease has not run out."""
    if row is None:
        raise NotFound.of("traverser", traverser_id)
    if row["status"] != TraverserStatus.RUNNING or row["epoch"] != epoch or row["lease_expires_at"] < now:
        raise LeaseLost.of(traverser_id)
    return row


def leased(conn: Conn, traverser_id: str, epoch: int, now: float) -> Row:
    """The traverser row, locked, if ``epoch`` is its live lease, else the transition is refused."""
    return live_row(_row(conn, SQL_LOCK_TRAVERSER, (traverser_id,)), traverser_id, epoch, now)


def record_steps(conn: Conn, row: Row, steps: Sequence[StepRecord], now: float) -> None:
    """The child steps a worker reports with its write: each recorded once, in the order given."""
    for step in steps:
        conn.execute(
            SQL_INSERT_STEP,
            (
                row["id"],
                step.key,
                step.seq,
                step.target,
                STEP_STATUS_IN[step.status],
                row["attempt"],
                step.result,
                step.error,
                now,
            ),
        )


__all__ = ["leased", "live_row", "record_steps"]
