"""Waking a run after one of its waits resolved or expired, for pyworkflow's runs and for runs
served by remote workers (``runs.node_id`` set: atfgraph's traversers, migration 0003 SQLite /
0006 PostgreSQL), in one rule per dialect:

- a pyworkflow run (``node_id`` NULL) is made due now, or, if a turn holds its queue row, its
  ``wake_seq`` is bumped so the turn's end keeps the row;
- a remote run is continued only when it is parked on that very wait (``status = 'suspended'
  AND waiting_on = wait_id``): it becomes pending, ``waiting_on`` NULL, ``max_attempts`` one more
  (a pause is not an attempt), and its queue row is created for its node, due now, with
  ``epoch = attempt`` (every remote claim increments both, so the fence keeps increasing across
  pauses). A remote run parked elsewhere, or not parked, is left alone.

The SQLite rule is :func:`wake_run` below; PostgreSQL's is the server-side function
``pyworkflow_wake(run, wait, now)`` (migration 0007), which :func:`wake_run` calls on a
PostgreSQL connection and the decision and expiry functions call themselves.
"""

from __future__ import annotations

import sqlite3
from typing import Any

# A pyworkflow run: due now, or, if a turn holds it, bump wake_seq so the turn's end keeps it
# (one statement, as before; no row changed: not a pyworkflow run).
SQL_WAKE = """
INSERT INTO queue (run_id, available_at, wake_seq)
SELECT id, ?2, 1 FROM runs WHERE id = ?1 AND node_id IS NULL
ON CONFLICT (run_id) DO UPDATE SET wake_seq = wake_seq + 1, available_at = MIN(available_at, ?2)
"""
# A remote run: whether it is parked (SQLite: one writer, so no lock to take).
SQL_RUN_FOR_WAKE = "SELECT node_id, status, waiting_on, attempt FROM runs WHERE id = ?"
# A remote run's continuation (the caller checked it is parked on the wait; the WHERE repeats it).
SQL_CONTINUE = """
UPDATE runs SET status = 'pending', waiting_on = NULL, max_attempts = max_attempts + 1, updated_at = ?1
WHERE id = ?2 AND node_id IS NOT NULL AND status = 'suspended' AND waiting_on = ?3
"""
# Its queue row for the node's workers. A parked run has none; should one have been left behind,
# it is taken over: due now, unleased, fenced at least as high as before.
SQL_QUEUE_CONTINUATION = """
INSERT INTO queue (run_id, available_at, wake_seq, epoch, node_id) VALUES (?1, ?2, 1, ?3, ?4)
ON CONFLICT (run_id) DO UPDATE SET
    available_at = excluded.available_at, wake_seq = wake_seq + 1, epoch = MAX(epoch, excluded.epoch),
    node_id = excluded.node_id, lease_owner = NULL, lease_expires_at = NULL
"""
SQL_PG_WAKE = "SELECT pyworkflow_wake(?::text, ?::text, ?::double precision)"


def wake_run(conn: Any, run_id: str, wait_id: str | None, now: float) -> str | None:
    """Wake ``run_id`` because its wait ``wait_id`` resolved or expired (None: no particular
    wait; a remote run is then never continued), inside the caller's write transaction on a kit
    database connection: SQLite's ``sqlite3.Connection`` or PostgreSQL's ``PgConnection`` (which
    runs the server-side ``pyworkflow_wake``, taking the run's lock if the caller has not).

    Returns the ``node_id`` of the remote run it continued, else None (a pyworkflow run woken, a
    remote run not parked on this wait, or no such run)."""
    if not isinstance(conn, sqlite3.Connection):
        row = conn.execute(SQL_PG_WAKE, (run_id, wait_id, now)).fetchone()
        return None if row is None or row[0] is None else str(row[0])
    if conn.execute(SQL_WAKE, (run_id, now)).rowcount:
        return None
    run = conn.execute(SQL_RUN_FOR_WAKE, (run_id,)).fetchone()
    if run is None:
        return None
    node_id, status, waiting_on, attempt = run[0], run[1], run[2], run[3]
    if wait_id is None or status != "suspended" or waiting_on != wait_id:
        return None
    if conn.execute(SQL_CONTINUE, (now, run_id, wait_id)).rowcount == 0:
        return None
    conn.execute(SQL_QUEUE_CONTINUATION, (run_id, now, attempt, node_id))
    return str(node_id)
