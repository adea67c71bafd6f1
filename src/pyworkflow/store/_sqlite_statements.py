"""SQLite's transitions written as one statement each, as PostgreSQL's are functions.

A transition the store runs in Python is several statements, each a round through the sqlite3
module holding the GIL (the fence's read, the write, the checkpoints' cleanup, the event). Written
as a TEMP view whose ``INSTEAD OF INSERT`` trigger does the same writes, the transition is one
``INSERT`` whose work runs inside SQLite with the GIL released, beside the event loop. The views
and triggers are TEMP: made on each writer connection before its first transaction
(:meth:`~pyworkflow.store.SQLiteDatabase.prepare_writers`), nothing in the file's schema, so no
migration and nothing an older version would trip on.

A refusal is ``RAISE(FAIL, ...)`` with one of the messages below, checked before the trigger's
first write, so it leaves nothing behind; the store turns it into the same error as PostgreSQL's.
Every write is ``OR FAIL`` too: an error after a write (a constraint that the store's own rules
keep from failing) is not undone by SQLite statement by statement but reaches the group-commit
writer, which rolls back the whole transaction and never commits after a write function raised.
With SQLite's default (ABORT) a trigger that writes more than once makes SQLite keep a statement
journal, a copy of the pages the statement changes, to be able to undo that statement alone
(spilled to a temporary file past 64 KiB): a run's creation and its end took a quarter to a
third longer, a wait's creation nearly twice as long (``python -m bench.sqlite_statements``;
bench/README.md). ``tests/unit/test_sqlite_statements.py`` keeps both rules.

Each is its PostgreSQL function's copy (pyworkflow's PostgreSQL migrations):

- ``pyworkflow_create_run``: a run, its queue row (leased at once to the process that starts
  it, or not) and ``run_created`` (``SQL_CREATE_RUN`` of ``_pg_sql.py``);
- ``pyworkflow_complete_step``: the fence, no second result, the step's row, its checkpoints
  deleted, ``step_completed`` (``pyworkflow_complete_step()``, 0009);
- ``pyworkflow_end_run``: the one rule that ends a run (a turn's end, a cancellation, the crash
  limit), fenced when given an epoch: the run's status with its result or error, its pending
  waits cancelled, its queue row and its steps' checkpoints deleted (scope '' is the run's
  own, an atfgraph traverser's, read after it ended: it stays), the event
  (``pyworkflow_end_run()``, 0009, and ``pyworkflow_finish_run()`` for the fenced end);
- ``pyworkflow_create_wait``: a turn's wait (a hook, a timer, a retry's back-off): the fence, a
  wait of that key refused as ``WAIT_EXISTS`` (the caller reads it), the wait, ``wait_created``,
  and with ``suspend`` the suspension (``pyworkflow_create_wait()``, 0002, and
  ``pyworkflow_create_wait_suspending()``, 0018);
- ``pyworkflow_suspended``: a run's suspended status and ``run_suspended``, for a turn that
  suspends with its wait, on a wait that existed, or at its end (``suspend_run``);
- ``pyworkflow_lease``: a claim's lease on the run's queue row (a new epoch), its running
  status and its event (``run_resumed``, ``run_recovered`` after a crash, none for a first
  turn), once ``_sqlite._claim_row`` applied the crash limit (``pyworkflow_claim_row()``, 0008);
- ``pyworkflow_save_checkpoint``: the fence, the checkpoint's compare-and-set (refused as
  ``REVISION_REFUSED``: the caller reads the current revision for its error), ``checkpoint_saved``
  (``pyworkflow_save_checkpoint()``, 0002); ``pyworkflow_put_checkpoint`` is the compare-and-set
  alone, which the graph store's traversers save theirs with (``write_checkpoint``): one text,
  ``_PUT_CHECKPOINT``, in both.

Where many turns run at once, every statement a write function runs from Python also gives up
the GIL while SQLite works and takes it back from the event loop: three trivial statements more a
write (``SELECT 1``) cost phases A and C all at once 8-35 % of their runs/s (bench/README.md),
several times their CPU. A checkpoint's save was six such round trips (the fence's read and the
revision's, each a step for the row and one to see there is no other, the write, the event), now
one. A checkpoint's deletion stays three statements from Python: as a trigger (the fence, the
event if there was a checkpoint, the deletion) it took more instructions, not fewer.
"""

from __future__ import annotations

#: ``RAISE(FAIL, ...)`` messages: the turn no longer holds the run; the step has a result; the
#: run has a wait of that key already (PostgreSQL's outcome 'exists': the caller reads it).
FENCE_REFUSED = "pyworkflow: fence"
HAS_RESULT = "pyworkflow: has_result"
WAIT_EXISTS = "pyworkflow: exists"
#: ``RAISE(FAIL, ...)``: the checkpoint is not at the revision the caller expected.
REVISION_REFUSED = "pyworkflow: revision"

#: The fence of a turn: NEW.run_id's queue row at NEW.epoch (``pyworkflow_fence()`` on PostgreSQL).
_FENCE = f"""SELECT RAISE(FAIL, '{FENCE_REFUSED}')
    WHERE NOT EXISTS (SELECT 1 FROM queue WHERE run_id = NEW.run_id AND epoch = NEW.epoch)"""

#: A history row of NEW.run_id (``SQL_APPEND_EVENT`` of ``_sqlite.py``, in a trigger's terms) ...
_EVENT_ROW = """NEW.{run}, (SELECT COALESCE(MAX(seq), 0) + 1 FROM events WHERE run_id = NEW.{run}),
            NEW.at, {type}, {key}, {data}"""
_EVENT = f"""INSERT OR FAIL INTO events (run_id, seq, at, type, key, data)
    VALUES ({_EVENT_ROW})"""
#: ... and one written only ``{{when}}``.
_EVENT_IF = f"""INSERT OR FAIL INTO events (run_id, seq, at, type, key, data)
    SELECT {_EVENT_ROW} WHERE {{when}}"""
#: A checkpoint's name in its events: the scope, and ``/name`` when it has one.
_CHECKPOINT_KEY = "CASE NEW.name WHEN '' THEN NEW.scope ELSE NEW.scope || '/' || NEW.name END"
#: NEW's checkpoint (the primary key).
_CHECKPOINT = "checkpoints WHERE run_id = NEW.run_id AND scope = NEW.scope AND name = NEW.name"
#: The compare-and-set of NEW's checkpoint, the rule of both faces on SQLite: refused unless it is
#: at the revision NEW.expected (NULL: any; 0: none yet), then written at the next revision. In
#: the triggers' text rather than a view of its own that they insert into: a nested trigger
#: costs about as much as the statements it saves.
_PUT_CHECKPOINT = f"""SELECT RAISE(FAIL, '{REVISION_REFUSED}')
    WHERE NEW.expected IS NOT NULL AND NEW.expected <> COALESCE((SELECT revision FROM {_CHECKPOINT}), 0);
    INSERT OR FAIL INTO checkpoints (run_id, scope, name, value, revision, updated_at)
    VALUES (NEW.run_id, NEW.scope, NEW.name, NEW.value, 1, NEW.at)
    ON CONFLICT (run_id, scope, name) DO UPDATE SET
        value = excluded.value, revision = checkpoints.revision + 1, updated_at = excluded.updated_at"""

WRITER_STATEMENTS = (
    """CREATE TEMP VIEW IF NOT EXISTS pyworkflow_complete_step (run_id, epoch, step_key, result, at)
AS SELECT NULL, NULL, NULL, NULL, NULL WHERE 0""",
    f"""CREATE TEMP TRIGGER IF NOT EXISTS pyworkflow_complete_step
INSTEAD OF INSERT ON pyworkflow_complete_step
BEGIN
    {_FENCE};
    SELECT RAISE(FAIL, '{HAS_RESULT}')
    WHERE EXISTS (SELECT 1 FROM steps WHERE run_id = NEW.run_id AND step_key = NEW.step_key
                  AND status IN ('completed', 'failed'));
    INSERT OR FAIL INTO steps (run_id, step_key, status, attempt, result, error, delivered, updated_at)
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
    INSERT OR FAIL INTO runs (id, workflow, status, input, created_at, updated_at)
    VALUES (NEW.id, NEW.workflow, NEW.status, NEW.input, NEW.at, NEW.at);
    INSERT OR FAIL INTO queue (run_id, available_at, wake_seq, epoch, lease_owner, lease_expires_at)
    VALUES (NEW.id, NEW.at, 0, NEW.epoch, NEW.lease_owner, NEW.lease_expires_at);
    {_EVENT.format(run="id", type="'run_created'", key="NULL", data="NULL")};
END""",
    """CREATE TEMP VIEW IF NOT EXISTS pyworkflow_end_run (run_id, epoch, status, result, error, event, at)
AS SELECT NULL, NULL, NULL, NULL, NULL, NULL, NULL WHERE 0""",
    f"""CREATE TEMP TRIGGER IF NOT EXISTS pyworkflow_end_run
INSTEAD OF INSERT ON pyworkflow_end_run
BEGIN
    {_FENCE} AND NEW.epoch IS NOT NULL;
    UPDATE OR FAIL runs SET status = NEW.status, result = NEW.result, error = NEW.error, updated_at = NEW.at,
        finished_at = NEW.at
    WHERE id = NEW.run_id;
    UPDATE OR FAIL waits SET status = 'cancelled', resolved_at = NEW.at
    WHERE run_id = NEW.run_id AND status = 'pending';
    DELETE FROM queue WHERE run_id = NEW.run_id;
    DELETE FROM checkpoints WHERE run_id = NEW.run_id AND scope <> '';
    {_EVENT.format(run="run_id", type="NEW.event", key="NULL", data="NEW.error")};
END""",
    # The run's suspended status and its event: a turn that suspends, with its wait or at its end.
    """CREATE TEMP VIEW IF NOT EXISTS pyworkflow_suspended (run_id, at) AS SELECT NULL, NULL WHERE 0""",
    f"""CREATE TEMP TRIGGER IF NOT EXISTS pyworkflow_suspended
INSTEAD OF INSERT ON pyworkflow_suspended
BEGIN
    UPDATE OR FAIL runs SET status = 'suspended', updated_at = NEW.at WHERE id = NEW.run_id;
    {_EVENT.format(run="run_id", type="'run_suspended'", key="NULL", data="NULL")};
END""",
    """CREATE TEMP VIEW IF NOT EXISTS pyworkflow_create_wait
    (run_id, epoch, id, wait_key, kind, name, step_key, token_digest, expires_at, payload_schema, suspend, at)
AS SELECT NULL, NULL, NULL, NULL, NULL, NULL, NULL, NULL, NULL, NULL, NULL, NULL WHERE 0""",
    f"""CREATE TEMP TRIGGER IF NOT EXISTS pyworkflow_create_wait
INSTEAD OF INSERT ON pyworkflow_create_wait
BEGIN
    {_FENCE};
    SELECT RAISE(FAIL, '{WAIT_EXISTS}')
    WHERE EXISTS (SELECT 1 FROM waits WHERE run_id = NEW.run_id AND wait_key = NEW.wait_key);
    INSERT OR FAIL INTO waits (id, run_id, wait_key, kind, name, step_key, token_digest, status, created_at,
                       expires_at, payload_schema)
    VALUES (NEW.id, NEW.run_id, NEW.wait_key, NEW.kind, NEW.name, NEW.step_key, NEW.token_digest, 'pending',
            NEW.at, NEW.expires_at, NEW.payload_schema);
    {_EVENT.format(run="run_id", type="'wait_created'", key="NEW.wait_key", data="NULL")};
    INSERT INTO pyworkflow_suspended SELECT NEW.run_id, NEW.at WHERE NEW.suspend;
END""",
    """CREATE TEMP VIEW IF NOT EXISTS pyworkflow_lease (run_id, owner, expires_at, crashes, event, at)
AS SELECT NULL, NULL, NULL, NULL, NULL, NULL WHERE 0""",
    f"""CREATE TEMP TRIGGER IF NOT EXISTS pyworkflow_lease
INSTEAD OF INSERT ON pyworkflow_lease
BEGIN
    UPDATE OR FAIL queue SET epoch = epoch + 1, lease_owner = NEW.owner, lease_expires_at = NEW.expires_at,
        crashes = NEW.crashes
    WHERE run_id = NEW.run_id;
    UPDATE OR FAIL runs SET status = 'running', updated_at = NEW.at WHERE id = NEW.run_id;
    {_EVENT_IF.format(run="run_id", type="NEW.event", key="NULL", data="NULL", when="NEW.event IS NOT NULL")};
END""",
    # A checkpoint's compare-and-set alone, for the graph store's traversers (write_checkpoint).
    """CREATE TEMP VIEW IF NOT EXISTS pyworkflow_put_checkpoint (run_id, scope, name, value, expected, at)
AS SELECT NULL, NULL, NULL, NULL, NULL, NULL WHERE 0""",
    f"""CREATE TEMP TRIGGER IF NOT EXISTS pyworkflow_put_checkpoint
INSTEAD OF INSERT ON pyworkflow_put_checkpoint
BEGIN
    {_PUT_CHECKPOINT};
END""",
    """CREATE TEMP VIEW IF NOT EXISTS pyworkflow_save_checkpoint
    (run_id, epoch, scope, name, value, expected, at)
AS SELECT NULL, NULL, NULL, NULL, NULL, NULL, NULL WHERE 0""",
    f"""CREATE TEMP TRIGGER IF NOT EXISTS pyworkflow_save_checkpoint
INSTEAD OF INSERT ON pyworkflow_save_checkpoint
BEGIN
    {_FENCE};
    {_PUT_CHECKPOINT};
    {_EVENT.format(run="run_id", type="'checkpoint_saved'", key=_CHECKPOINT_KEY, data="NULL")};
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

#: A wait, and with it the suspension when ``suspend``: (run, epoch, id, key, kind, name, step
#: key, token digest, expiry, payload schema, suspend, at).
SQL_CREATE_WAIT = """
INSERT INTO pyworkflow_create_wait (run_id, epoch, id, wait_key, kind, name, step_key, token_digest,
                                    expires_at, payload_schema, suspend, at)
VALUES (?, ?, ?, ?, ?, ?, ?, ?, ?, ?, ?, ?)
"""
#: The suspension alone (a turn that suspends on a wait it did not create): (run, at).
SQL_SUSPENDED = "INSERT INTO pyworkflow_suspended (run_id, at) VALUES (?, ?)"
#: A claim's lease: (run, owner, lease expiry, crashes, event or NULL for none, at).
SQL_LEASE = """
INSERT INTO pyworkflow_lease (run_id, owner, expires_at, crashes, event, at) VALUES (?, ?, ?, ?, ?, ?)
"""
#: A checkpoint's compare-and-set alone: (run, scope, name, value, expected revision or NULL for
#: any, at).
SQL_PUT_CHECKPOINT = """
INSERT INTO pyworkflow_put_checkpoint (run_id, scope, name, value, expected, at) VALUES (?, ?, ?, ?, ?, ?)
"""
#: A turn's checkpoint: the fence, the compare-and-set, the event: (run, epoch, scope, name,
#: value, expected revision or NULL for any, at).
SQL_SAVE_CHECKPOINT = """
INSERT INTO pyworkflow_save_checkpoint (run_id, epoch, scope, name, value, expected, at)
VALUES (?, ?, ?, ?, ?, ?, ?)
"""

__all__ = [
    "FENCE_REFUSED",
    "HAS_RESULT",
    "REVISION_REFUSED",
    "SQL_COMPLETE_STEP",
    "SQL_CREATE_RUN",
    "SQL_CREATE_WAIT",
    "SQL_END_RUN",
    "SQL_LEASE",
    "SQL_PUT_CHECKPOINT",
    "SQL_SAVE_CHECKPOINT",
    "SQL_SUSPENDED",
    "WAIT_EXISTS",
    "WRITER_STATEMENTS",
]
