"""Retention: runs that finished (completed, failed or cancelled) before a cut-off are deleted
with everything of theirs (events, steps, waits and their extra tokens, checkpoints, a queue row
left behind), in bounded batches.

One rule for every caller (pyworkflow's local runtime and Celery sweeper, the graph server's
sweeper, ``atfg db purge``), written once in SQL that both dialects take (the kit databases
translate ``?`` and the lock hint). A component that keeps rows of its own about a run's waits
(atfgraph's decision links, notifications, assignments) deletes them with a trigger on the
deletion of a wait (atfgraph migration 0009 on SQLite, 0011 on PostgreSQL), so that they go in
the same transaction whoever purges; it names those tables as ``counted`` to have them counted
in the report (and in the dry run).

Why batches: on SQLite a write holds the file's one write lock, so a purge of 10,000 runs in one
transaction would stall every run for its whole length; on PostgreSQL one huge transaction holds
its locks and its dead rows until it ends. A batch of :data:`PURGE_BATCH` runs is one short
transaction on the group-commit writer, between which everybody else's transitions go through.
The runs of a batch are taken with ``FOR UPDATE SKIP LOCKED`` on PostgreSQL, so two purgers (two
servers' sweepers) never wait on each other or delete the same run twice.

The walk is served by ``runs_finished`` (finished runs by ``finished_at``; pyworkflow migration
0005 on SQLite, 0011 on PostgreSQL), so a pass that finds nothing to delete reads one index
entry.
"""

from __future__ import annotations

import logging
import re
import time
from collections.abc import Sequence
from dataclasses import dataclass, field
from typing import Any

from .._errors import ConfigurationError

_log = logging.getLogger("pyworkflow.retention")

#: Runs deleted per transaction.
PURGE_BATCH = 500
#: Ids per ``IN (...)`` list: far below SQLite's bound on host parameters.
_CHUNK = 500

#: The runs that retention deletes: finished ones, by the time they finished (``runs_finished``).
SQL_PURGEABLE_RUNS = """
SELECT id FROM runs
WHERE finished_at < ? AND status IN ('completed', 'failed', 'cancelled')
ORDER BY finished_at LIMIT ? /*FOR UPDATE SKIP LOCKED*/
"""
#: How many runs retention would delete (the dry run).
SQL_COUNT_PURGEABLE = (
    "SELECT COUNT(*) FROM runs WHERE finished_at < ? AND status IN ('completed', 'failed', 'cancelled')"
)
_PURGEABLE = "SELECT id FROM runs WHERE finished_at < ? AND status IN ('completed', 'failed', 'cancelled')"
#: The waits of a batch of runs (``UNIQUE (run_id, wait_key)`` serves it).
SQL_WAITS_OF = "SELECT id FROM waits WHERE run_id IN ({ids})"

#: A run's rows, deleted in this order: rows keyed by a wait id first, then by the run id, the
#: run last. (table, the column holding the wait's or the run's id.)
WAIT_TABLES: tuple[tuple[str, str], ...] = (("wait_tokens", "wait_id"),)
RUN_TABLES: tuple[tuple[str, str], ...] = (
    ("waits", "run_id"),
    ("events", "run_id"),
    ("steps", "run_id"),
    ("checkpoints", "run_id"),
    ("queue", "run_id"),
    ("runs", "id"),
)

_AGE = re.compile(r"^\s*(\d+(?:\.\d+)?)\s*(s|m|h|d|w)?\s*$")
_UNIT = {"s": 1, "m": 60, "h": 3600, "d": 86400, "w": 7 * 86400}


def parse_age(value: Any, *, what: str = "age") -> float:
    """An age in seconds from ``30d``, ``12h``, ``90m``, ``45s``, ``2w`` or a number of
    seconds; ``ConfigurationError`` for anything else (zero and negative ages included)."""
    if isinstance(value, bool):
        raise ConfigurationError(f"{what} must be an age such as 30d, 12h or 90m, not {value!r}")
    if isinstance(value, int | float):
        seconds = float(value)
    else:
        match = _AGE.match(value) if isinstance(value, str) else None
        if match is None:
            raise ConfigurationError(f"{what} must be an age such as 30d, 12h or 90m, not {value!r}")
        seconds = float(match.group(1)) * _UNIT[match.group(2) or "s"]
    if not 0 < seconds < float("inf"):
        raise ConfigurationError(f"{what} must be a positive age, not {value!r}")
    return seconds


@dataclass(slots=True)
class PurgeReport:
    """What a purge deleted (or, for a dry run, would delete): rows per table, and how."""

    counts: dict[str, int] = field(default_factory=dict)
    batches: int = 0
    seconds: float = 0.0
    finished: bool = True  # False: stopped at max_batches with more to delete

    @property
    def runs(self) -> int:
        return self.counts.get("runs", 0)

    def add(self, counts: dict[str, int]) -> None:
        for table, n in counts.items():
            self.counts[table] = self.counts.get(table, 0) + n


def _chunks(ids: Sequence[str]) -> list[Sequence[str]]:
    return [ids[i : i + _CHUNK] for i in range(0, len(ids), _CHUNK)]


def _delete(conn: Any, table: str, column: str, ids: Sequence[str]) -> int:
    deleted = 0
    for chunk in _chunks(ids):
        marks = ", ".join("?" * len(chunk))
        deleted += max(
            conn.execute(f"DELETE FROM {table} WHERE {column} IN ({marks})", tuple(chunk)).rowcount, 0
        )
    return deleted


def _count(conn: Any, table: str, column: str, ids: Sequence[str]) -> int:
    counted = 0
    for chunk in _chunks(ids):
        marks = ", ".join("?" * len(chunk))
        counted += int(
            conn.execute(
                f"SELECT COUNT(*) FROM {table} WHERE {column} IN ({marks})", tuple(chunk)
            ).fetchone()[0]
        )
    return counted


def purge_batch(
    conn: Any, before: float, *, limit: int = PURGE_BATCH, counted: Sequence[tuple[str, str]] = ()
) -> dict[str, int]:
    """One batch, inside the caller's transaction (a write function of the kit database): up to
    ``limit`` runs finished before ``before`` deleted with their rows; rows deleted per table.
    ``counted``: (table, wait id column) of other components' rows about those runs' waits,
    which their triggers delete with the waits: counted here before they go."""
    run_ids = [r[0] for r in conn.execute(SQL_PURGEABLE_RUNS, (before, limit)).fetchall()]
    counts = {table: 0 for table, _ in (*counted, *WAIT_TABLES, *RUN_TABLES)}
    if not run_ids:
        return counts
    wait_ids: list[str] = []
    for chunk in _chunks(run_ids):
        sql = SQL_WAITS_OF.format(ids=", ".join("?" * len(chunk)))
        wait_ids += [r[0] for r in conn.execute(sql, tuple(chunk)).fetchall()]
    for table, column in counted:
        counts[table] = _count(conn, table, column, wait_ids) if wait_ids else 0
    for table, column in WAIT_TABLES:
        counts[table] = _delete(conn, table, column, wait_ids) if wait_ids else 0
    for table, column in RUN_TABLES:
        counts[table] = _delete(conn, table, column, run_ids)
    return counts


def count_purgeable(conn: Any, before: float, *, counted: Sequence[tuple[str, str]] = ()) -> dict[str, int]:
    """What a purge with this cut-off would delete now, per table (a read: the dry run)."""
    waits = f"SELECT id FROM waits WHERE run_id IN ({_PURGEABLE})"
    counts: dict[str, int] = {}
    for table, column in (*counted, *WAIT_TABLES):
        counts[table] = int(
            conn.execute(f"SELECT COUNT(*) FROM {table} WHERE {column} IN ({waits})", (before,)).fetchone()[0]
        )
    for table, column in RUN_TABLES:
        if table == "runs":
            counts[table] = int(conn.execute(SQL_COUNT_PURGEABLE, (before,)).fetchone()[0])
        else:
            sql = f"SELECT COUNT(*) FROM {table} WHERE {column} IN ({_PURGEABLE})"
            counts[table] = int(conn.execute(sql, (before,)).fetchone()[0])
    return counts


async def purge_runs(
    db: Any,
    before: float,
    *,
    batch: int = PURGE_BATCH,
    max_batches: int | None = None,
    counted: Sequence[tuple[str, str]] = (),
) -> PurgeReport:
    """Delete every run finished before ``before`` (seconds since the epoch) with its rows, one
    batch per transaction on ``db`` (a kit database: :class:`SQLiteDatabase` or
    :class:`PostgresDatabase`), until none is left or ``max_batches`` ran. ``counted``: as
    :func:`purge_batch`. A program without an event loop runs it with ``asyncio.run``."""
    report = PurgeReport()
    started = time.monotonic()
    while max_batches is None or report.batches < max_batches:
        counts = await db.write(lambda conn: purge_batch(conn, before, limit=batch, counted=counted))
        report.batches += 1
        report.add(counts)
        if counts["runs"] < batch:
            break
    else:
        report.finished = False
    report.seconds = time.monotonic() - started
    return report


#: Batches one pass of a runtime's purger deletes at most, before the runtime's other work.
PASS_BATCHES = 20
#: The longest pause between two passes of a runtime's purger.
PURGE_SECONDS = 60.0


class Purger:
    """A runtime's retention, ticked by its loop (pyworkflow's local runtime, the Celery
    sweeper): a pass of at most :data:`PASS_BATCHES` batches every ``min(60 s, retention / 10)``,
    at once again while a pass left work behind. A tick that is not due costs nothing."""

    def __init__(self, db: Any, retention: float, *, counted: Sequence[tuple[str, str]] = ()) -> None:
        self.db = db
        self.retention = retention
        self.every = min(PURGE_SECONDS, retention / 10)
        self.counted = counted
        self._next = 0.0

    async def tick(self) -> PurgeReport | None:
        """A pass if one is due (its report), else None. Errors propagate: the caller's loop logs
        them, and the next pass is due at the usual time."""
        started = time.monotonic()
        if started < self._next:
            return None
        self._next = started + self.every
        report = await purge_runs(
            self.db, time.time() - self.retention, max_batches=PASS_BATCHES, counted=self.counted
        )
        if not report.finished:
            self._next = time.monotonic()
        if report.runs:
            _log.info("retention: purged %d finished run(s) in %.2f s", report.runs, report.seconds)
        return report
