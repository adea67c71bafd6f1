"""An operator's transitions of a whole run, written once for both dialects (the kit databases
translate ``?`` and the lock hint): the reason of a cancellation, and the retry of a failed run.

A retry is a new attempt of a failed run from what it recorded (DBOS ``resume``, Prefect's
retry): the run is ``suspended`` again (so that its next claim loads what it recorded, as for
any resumed run) with a queue row due now, its completed steps stay and are
replayed, its failed (or unfinished) steps are forgotten so that they run again, and its own
checkpoints (scope ``''``) are there to load. The queue row's epoch starts above every epoch any
earlier turn held (each claim appends an event, so the run's last event number bounds them):
a turn of the failed attempt that is still alive somewhere cannot write into the new one.
"""

from __future__ import annotations

from typing import Any

#: The run, locked (PostgreSQL) before an operator's transition of it.
SQL_LOCK_RUN = "SELECT status, node_id FROM runs WHERE id = ? /*FOR UPDATE*/"
#: A cancelled run's reason, in its error (``{"type": "CancellationError", "message": reason}``).
SQL_CANCEL_REASON = "UPDATE runs SET error = ? WHERE id = ?"
#: A failed run is resumable again (runs' primary key).
SQL_RETRY_RUN = """
UPDATE runs SET status = 'suspended', result = NULL, error = NULL, finished_at = NULL, updated_at = ?
WHERE id = ? AND status = 'failed'
"""
#: Forget the steps that did not complete: they run again; completed ones are replayed.
SQL_RETRY_STEPS = "DELETE FROM steps WHERE run_id = ? AND status <> 'completed'"
#: Its queue row, due now, fenced above every earlier turn (see the module's docstring).
SQL_RETRY_QUEUE = """
INSERT INTO queue (run_id, available_at, wake_seq, epoch)
VALUES (?, ?, 0, (SELECT COALESCE(MAX(seq), 0) + 1 FROM events WHERE run_id = ?))
"""
#: The run's history records the retry (the next event number: a primary-key probe).
SQL_RETRY_EVENT = """
INSERT INTO events (run_id, seq, at, type)
VALUES (?, (SELECT COALESCE(MAX(seq), 0) + 1 FROM events WHERE run_id = ?), ?, 'run_retried')
"""


def retry_run_tx(conn: Any, run_id: str, now: float) -> str:
    """The retry inside the caller's transaction: ``ok``, ``missing``, ``remote`` (a run served
    by remote workers: the graph server retries those), or the status of a run that has not
    failed (nothing changed)."""
    row = conn.execute(SQL_LOCK_RUN, (run_id,)).fetchone()
    if row is None:
        return "missing"
    if row[1] is not None:
        return "remote"
    if row[0] != "failed" or conn.execute(SQL_RETRY_RUN, (now, run_id)).rowcount == 0:
        return str(row[0])
    conn.execute(SQL_RETRY_STEPS, (run_id,))
    conn.execute(SQL_RETRY_QUEUE, (run_id, now, run_id))
    conn.execute(SQL_RETRY_EVENT, (run_id, run_id, now))
    return "ok"
