"""SQLite's transitions written as one statement each, as PostgreSQL's are functions.

A transition the store runs in Python is several statements, each a round through the sqlite3
module holding the GIL (the fence's read, the write, the checkpoints' cleanup, the event). Written
as a TEMP view whose ``INSTEAD OF INSERT`` trigger does the same writes, the transition is one
``INSERT`` whose work runs inside SQLite with the GIL released, beside the event loop. The views
and triggers are TEMP: made on each writer connection before its first transaction
(:meth:`~pyworkflow.store.SQLiteDatabase.prepare_writers`), nothing in the file's schema, so no
migration and nothing an older version would trip on.

A refusal is ``RAISE(ABORT, ...)`` with one of the messages below: it undoes the statement's
writes (the trigger's included) and the store turns it into the same error as PostgreSQL's.

Each is its PostgreSQL function's copy (pyworkflow's PostgreSQL migrations):

- ``pyworkflow_create_run``: a run, its queue row (leased at once to the process that starts
  it, or not) and ``run_created`` (``SQL_CREATE_RUN`` of ``_pg_sql.py``);
- ``pyworkflow_complete_step``: the fence, no second result, the step's row, its checkpoints
  deleted, ``step_completed`` (``pyworkflow_complete_step()``, 0009);
- ``pyworkflow_end_run``: the one rule that ends a run (a turn's end, a cancellation, the crash
  limit), fenced when given an epoch: the run's status with its result or error, its pending
  waits cancelled, its queue row and its steps' checkpoints deleted (scope '' is the run's
  own, an atfgraph traverser's, read after it ended: it stays), the event
  (``pyworkflow_end_run()``, 0009, and ``pyworkflow_finish_run()`` for the fenced end).
"""

from __future__ import annotations

#: ``RAISE(ABORT, ...)`` messages: the turn no longer holds the run; the step has a result.
FENCE_REFUSED = "pyworkflow: fence"
HAS_RESULT = "pyworkflow: has_result"

#: A history row of NEW.run_id (``SQL_APPEND_EVENT`` of ``_sqlite.py``, in a trigger's terms).
_EVENT = """INSERT INTO events (run_id, seq, at, type, key, data)
    VALUES (NEW.{run}, (SELECT COALESCE(MAX(seq), 0) + 1 FROM events WHERE run_id = NEW.{run}),
            NEW.at, {type}, {key}, {data})"""

WRITER_STATEMENTS = (
    """CREATE TEMP VIEW IF NOT EXISTS pyworkflow_complete_step (run_id, epoch, step_key, result, at)
AS SELECT NULL, NULL, NULL, NULL, NULL WHERE 0""",
    f"""CREATE TEMP TRIGGER IF NOT EXISTS pyworkflow_complete_step
INSTEAD OF INSERT ON pyworkflow_complete_step
BEGIN
    SELECT RAISE(ABORT, '{FENCE_REFUSED}')
    WHERE NOT EXISTS (SELECT 1 FROM queue WHERE run_id = NEW.run_id AND epoch = NEW.epoch);
    SELECT RAISE(ABORT, '{HAS_RESULT}')
    WHERE EXISTS (SELECT 1 FROM steps WHERE run_id = NEW.run_id AND step_key = NEW.step_key
                  AND status IN ('completed', 'failed'));
    INSERT INTO steps (run_id, step_key, status, attempt, result, error, delivered, updated_at)
    VALUES (NEW.run_id, NEW.step_key, 'completed', 0, NEW.result, NULL, 0, NEW.at)
    ON CONFLICT (run_id, step_key) DO UPDATE SET
        status = 'completed', attempt = 0, result = excluded.result, error = NULL,
        updated_at = excluded.updated_at;
    DELETE FROM checkpoints WHERE run_id = NEW.run_id AND scope = NEW.step_key;
    {_EVENT.format(run="run_id", type="'step_completed'", key="NEW.step_key", data="NULL")};
END""",
    """CREATE TEMP VIEW IF NOT EXISTS pyworkflow_create_run
    (id, workflow, status, input, at, epoch, lease_owner, lease_expires_at)
AS SELECT NULL, NULL, NULL, NULL, NULL, NULL, NULL, NULL WHERE 0""",
    f"""CREATE TEMP TRIGGER IF NOT EXISTS pyworkflow_create_run
INSTEAD OF INSERT ON pyworkflow_create_run
BEGIN
    INSERT INTO runs (id, workflow, status, input, created_at, updated_at)
    VALUES (NEW.id, NEW.workflow, NEW.status, NEW.input, NEW.at, NEW.at);
    INSERT INTO queue (run_id, available_at, wake_seq, epoch, lease_owner, lease_expires_at)
    VALUES (NEW.id, NEW.at, 0, NEW.epoch, NEW.lease_owner, NEW.lease_expires_at);
    {_EVENT.format(run="id", type="'run_created'", key="NULL", data="NULL")};
END""",
    """CREATE TEMP VIEW IF NOT EXISTS pyworkflow_end_run (run_id, epoch, status, result, error, event, at)
AS SELECT NULL, NULL, NULL, NULL, NULL, NULL, NULL WHERE 0""",
    f"""CREATE TEMP TRIGGER IF NOT EXISTS pyworkflow_end_run
INSTEAD OF INSERT ON pyworkflow_end_run
BEGIN
    SELECT RAISE(ABORT, '{FENCE_REFUSED}')
    WHERE NEW.epoch IS NOT NULL
      AND NOT EXISTS (SELECT 1 FROM queue WHERE run_id = NEW.run_id AND epoch = NEW.epoch);
    UPDATE runs SET status = NEW.status, result = NEW.result, error = NEW.error, updated_at = NEW.at,
        finished_at = NEW.at
    WHERE id = NEW.run_id;
    UPDATE waits SET status = 'cancelled', resolved_at = NEW.at
    WHERE run_id = NEW.run_id AND status = 'pending';
    DELETE FROM queue WHERE run_id = NEW.run_id;
    DELETE FROM checkpoints WHERE run_id = NEW.run_id AND scope <> '';
    {_EVENT.format(run="run_id", type="NEW.event", key="NULL", data="NEW.error")};
END""",
)

#: A step's result, its checkpoints deleted and the event, in one statement (fenced).
SQL_COMPLETE_STEP = (
    "INSERT INTO pyworkflow_complete_step (run_id, epoch, step_key, result, at) VALUES (?, ?, ?, ?, ?)"
)

#: A new run, its queue row and ``run_created``: (id, workflow, status, input, at, epoch,
#: lease owner, lease expiry).
SQL_CREATE_RUN = """
INSERT INTO pyworkflow_create_run (id, workflow, status, input, at, epoch, lease_owner, lease_expires_at)
VALUES (?, ?, ?, ?, ?, ?, ?, ?)
"""
#: A run's end: (run, epoch or NULL for an end without a fence, status, result, error, event, at).
SQL_END_RUN = """
INSERT INTO pyworkflow_end_run (run_id, epoch, status, result, error, event, at) VALUES (?, ?, ?, ?, ?, ?, ?)
"""

__all__ = [
    "FENCE_REFUSED",
    "HAS_RESULT",
    "SQL_COMPLETE_STEP",
    "SQL_CREATE_RUN",
    "SQL_END_RUN",
    "WRITER_STATEMENTS",
]
