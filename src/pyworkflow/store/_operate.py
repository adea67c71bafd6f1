"""An operator's changes to a pyworkflow run from another program's transaction: cancel it, or
retry it after it failed. The graph server's console and API call these inside the write that
also records its audit entry, on a kit database connection of either dialect (SQLite's
``sqlite3.Connection`` or PostgreSQL's ``PgConnection``), so the change and its audit row commit
together. A traverser is not a pyworkflow run: these refuse it (``not_a_workflow``).

- **cancel**: the run ends as every run ends (SQLite ``_end_run``, PostgreSQL
  ``pyworkflow_cancel_run``, migration 0008): cancelled, its pending waits cancelled, its queue
  row and its steps' checkpoints deleted.
- **retry** (``failed -> suspended``): the failed step records are deleted, so those steps run
  again with a fresh retry budget; completed steps keep their results and are replayed, received
  waits keep their payloads. The run is queued due now (crashes reset), and a ``run_retried``
  event is appended. It is ``suspended``, not ``pending``, because a claim of a pending run
  starts it from nothing, while a suspended one's turn loads what it recorded. A pyworkflow
  runtime serving the database (local or Celery) takes the turn. What the failure ended stays
  ended: its step checkpoints were deleted and a wait it cancelled stays cancelled.
"""

from __future__ import annotations

import sqlite3
from typing import Any

from ._protocol import RunStatus
from ._sqlite import _end_run

# The run and its kind, locked (PostgreSQL) for the change (primary key).
SQL_RUN_FOR_CHANGE = "SELECT status, node_id FROM runs WHERE id = ? /*FOR UPDATE*/"
SQL_PG_CANCEL = "SELECT pyworkflow_cancel_run(?::text, ?::double precision)"
# A failed run's failed steps: deleted, so they run again (the primary key's prefix).
SQL_DROP_FAILED_STEPS = "DELETE FROM steps WHERE run_id = ? AND status = 'failed'"
SQL_REOPEN_RUN = """
UPDATE runs SET status = 'suspended', error = NULL, finished_at = NULL, updated_at = ?
WHERE id = ? AND status = 'failed' AND node_id IS NULL
"""
# Its turn: due now, unleased, no crash counted (the ending deleted its row; one left is reset).
SQL_QUEUE_RETRY = """
INSERT INTO queue (run_id, available_at, wake_seq) VALUES (?, ?, 1)
ON CONFLICT (run_id) DO UPDATE SET available_at = excluded.available_at, wake_seq = queue.wake_seq + 1,
    lease_owner = NULL, lease_expires_at = NULL, crashes = 0
"""
SQL_RETRIED_EVENT = """
INSERT INTO events (run_id, seq, at, type, key, data)
VALUES (?, (SELECT COALESCE(MAX(seq), 0) + 1 FROM events WHERE run_id = ?), ?, 'run_retried', NULL, NULL)
"""
SQL_PG_WAKE_RUNTIMES = "SELECT pg_notify('pyworkflow_queue', '')"

#: What :func:`cancel_run_in` and :func:`retry_run_in` answer.
OUTCOMES = ("ok", "missing", "finished", "not_failed", "not_a_workflow")


def _kind(conn: Any, run_id: str) -> tuple[str, str | None]:
    row = conn.execute(SQL_RUN_FOR_CHANGE, (run_id,)).fetchone()
    if row is None:
        return "missing", None
    if row[1] is not None:
        return "not_a_workflow", None
    return "ok", str(row[0])


def cancel_run_in(conn: Any, run_id: str, now: float) -> str:
    """Cancel the pyworkflow run ``run_id`` in the caller's transaction: ``ok``, ``missing``,
    ``not_a_workflow`` or ``finished`` (it had ended; nothing changed)."""
    found, status = _kind(conn, run_id)
    if found != "ok":
        return found
    assert status is not None
    if RunStatus(status).is_terminal:
        return "finished"
    if isinstance(conn, sqlite3.Connection):
        _end_run(conn, run_id, RunStatus.CANCELLED, None, None, now)
        return "ok"
    row = conn.execute(SQL_PG_CANCEL, (run_id, now)).fetchone()
    return str(row[0])


def retry_run_in(conn: Any, run_id: str, now: float) -> str:
    """Queue the failed pyworkflow run ``run_id`` again in the caller's transaction: ``ok``,
    ``missing``, ``not_a_workflow`` or ``not_failed`` (nothing changed)."""
    found, status = _kind(conn, run_id)
    if found != "ok":
        return found
    if status != RunStatus.FAILED.value:
        return "not_failed"
    conn.execute(SQL_DROP_FAILED_STEPS, (run_id,))
    conn.execute(SQL_REOPEN_RUN, (now, run_id))
    conn.execute(SQL_QUEUE_RETRY, (run_id, now))
    conn.execute(SQL_RETRIED_EVENT, (run_id, run_id, now))
    if not isinstance(conn, sqlite3.Connection):
        conn.execute(SQL_PG_WAKE_RUNTIMES)
    return "ok"


__all__ = ["OUTCOMES", "cancel_run_in", "retry_run_in"]
