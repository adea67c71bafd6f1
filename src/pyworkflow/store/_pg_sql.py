"""The PostgreSQL store's SQL, one statement per purpose (the server-side functions
``pyworkflow_*`` come from migrations 0002-0004 and 0007-0009).

Written in the one style of all the kit's SQL: ``?`` placeholders for parameters given as a
sequence, ``:name`` for parameters given as a dict; every path that sends a statement translates
it for psycopg with :func:`._pg_db.translate` (cached). These statements only ever run on
PostgreSQL, so they write their row locks (``FOR UPDATE``) as plain clauses."""

from __future__ import annotations

from ._rows import RUN_COLUMNS, WAIT_COLUMNS

#: The channel a transaction that makes work due notifies (payload empty, so one per commit).
CHANNEL = "pyworkflow_queue"

# The run's lock, and the fence of a turn in the same round trip (queue row may be gone).
SQL_LOCK_RUN = """
SELECT r.status, q.epoch FROM runs r LEFT JOIN queue q ON q.run_id = r.id WHERE r.id = ? FOR UPDATE OF r
"""
# Next event number of a run: the primary key makes MAX(seq) one index probe; the run lock held
# by the caller makes it race-free.
SQL_APPEND_EVENT = """
INSERT INTO events (run_id, seq, at, type, key, data)
VALUES (:run, (SELECT COALESCE(MAX(seq), 0) + 1 FROM events WHERE run_id = :run), :at, :type,
        :key, :data)
"""
# A new run, its queue row (optionally leased at once to the process that starts it) and its
# first event, in one statement (so one round trip, no BEGIN/COMMIT); NOTIFY when nobody holds it.
SQL_CREATE_RUN = """
WITH r AS (
    INSERT INTO runs (id, workflow, status, input, created_at, updated_at)
    VALUES (:run, :workflow, :status, :input, :now, :now)
), q AS (
    INSERT INTO queue (run_id, available_at, wake_seq, epoch, lease_owner, lease_expires_at)
    VALUES (:run, :now, 0, :epoch, :owner, :expires)
), e AS (
    INSERT INTO events (run_id, seq, at, type) VALUES (:run, 1, :now, 'run_created')
)
SELECT pg_notify('pyworkflow_queue', '') WHERE :notify
"""
SQL_NOTIFY = f"NOTIFY {CHANNEL}"
SQL_SET_RUN_STATUS = "UPDATE runs SET status = ?, updated_at = ? WHERE id = ?"
SQL_FINISH_RUN = """
UPDATE runs SET status = ?, result = ?, error = ?, updated_at = ?, finished_at = ? WHERE id = ?
"""
# Give a lease back (release): the row stays, unleased and due now.
SQL_UNLEASE = """
UPDATE queue SET lease_owner = NULL, lease_expires_at = NULL, available_at = ? WHERE run_id = ?
"""
SQL_DELETE_QUEUE = "DELETE FROM queue WHERE run_id = ?"
# Runs a claim would take: unleased rows that became due between :after and :due, and rows
# whose lease ran out; with the epoch and due time that tell one wake-up of a run from the next.
# Two ordered index scans that stop at :limit rows each (queue_local_ready, queue_local_leases):
# one scan with the two cases ORed read every queue row in order whenever fewer than :limit
# were ready (22 ms a sweep with 200,000 runs sleeping).
SQL_READY_IDS = """
SELECT run_id, epoch, available_at FROM (
  (SELECT run_id, epoch, available_at FROM queue
   WHERE node_id IS NULL AND lease_owner IS NULL AND available_at <= :due AND available_at >= :after
   ORDER BY available_at LIMIT :limit)
  UNION ALL
  (SELECT run_id, epoch, available_at FROM queue
   WHERE node_id IS NULL AND lease_expires_at < :now AND lease_owner IS NOT NULL AND available_at <= :now
   ORDER BY lease_expires_at LIMIT :limit)
) ready ORDER BY available_at LIMIT :limit
"""
# How many queue rows a claim would take now, counted up to :limit (1: is there any; the Celery
# sweeper's weighing of them against its broker's queue).
SQL_COUNT_READY = """
SELECT count(*) FROM (SELECT 1 FROM queue
WHERE node_id IS NULL AND available_at <= :now AND (lease_expires_at IS NULL OR lease_expires_at < :now)
LIMIT :limit) due
"""
# Several queue rows at once: locked in run id order first (the order groups lock runs in), so a
# heartbeat never waits in a cycle with a group that holds some of the same runs. By owner, and
# only pyworkflow's rows (a remote run's lease is its node's workers').
SQL_HEARTBEAT = """
UPDATE queue SET lease_expires_at = :expires
WHERE run_id IN (SELECT run_id FROM queue WHERE lease_owner = :owner AND node_id IS NULL
                 ORDER BY run_id FOR UPDATE)
  AND lease_owner = :owner AND node_id IS NULL
"""
SQL_EXPIRE_LEASES = """
UPDATE queue SET lease_expires_at = :expires
WHERE run_id IN (SELECT run_id FROM queue WHERE lease_owner = ANY(:owners) AND node_id IS NULL
                 ORDER BY run_id FOR UPDATE)
  AND lease_owner = ANY(:owners) AND node_id IS NULL
"""
SQL_LEASE_OWNERS = """
SELECT DISTINCT lease_owner FROM queue
WHERE lease_owner IS NOT NULL AND lease_expires_at >= ? AND node_id IS NULL
"""
# As pyworkflow_next_due (migration 0013): two ordered index lookups, not a read of the whole queue.
SQL_NEXT_DUE = "SELECT pyworkflow_next_due()"
# The earliest pending deadline, through waits_due (its predicate is this one): the Celery sweeper
# wakes for it even behind a backlog of due queue rows, which pyworkflow_next_due returns first.
SQL_NEXT_DEADLINE = "SELECT MIN(expires_at) FROM waits WHERE status = 'pending' AND expires_at IS NOT NULL"
# Both in one round trip: what the Celery sweeper reads after each sweep to know how long to sleep.
SQL_NEXT_WAKE = f"{SQL_NEXT_DUE}, ({SQL_NEXT_DEADLINE})"
SQL_STEP = "SELECT status FROM steps WHERE run_id = ? AND step_key = ?"
SQL_UPSERT_STEP = """
INSERT INTO steps (run_id, step_key, status, attempt, result, error, delivered, updated_at)
VALUES (:run, :key, :status, :attempt, :result, :error, :delivered, :now)
ON CONFLICT (run_id, step_key) DO UPDATE SET
    status = EXCLUDED.status, attempt = EXCLUDED.attempt, result = EXCLUDED.result, error = EXCLUDED.error,
    delivered = GREATEST(steps.delivered, EXCLUDED.delivered), updated_at = EXCLUDED.updated_at
"""
# A step's checkpoints, deleted with its final failure (its completion and the end of a run do it
# server-side, migration 0009); primary key prefix.
SQL_DELETE_STEP_CHECKPOINTS = "DELETE FROM checkpoints WHERE run_id = ? AND scope = ?"
SQL_WAIT_BY_KEY = f"SELECT {WAIT_COLUMNS} FROM waits WHERE run_id = ? AND wait_key = ?"
SQL_WAIT_BY_ID = f"SELECT {WAIT_COLUMNS} FROM waits WHERE id = ?"
# A wait by its first token or by one handed out again later (wait_tokens).
SQL_WAIT_BY_TOKEN = f"""
SELECT {WAIT_COLUMNS} FROM waits WHERE token_digest = :digest
UNION ALL
SELECT {WAIT_COLUMNS} FROM waits WHERE id = (SELECT wait_id FROM wait_tokens WHERE token_digest = :digest)
LIMIT 1
"""
SQL_INSERT_WAIT = """
INSERT INTO waits (id, run_id, wait_key, kind, name, step_key, token_digest, status, created_at, expires_at,
                   payload_schema)
VALUES (?, ?, ?, ?, ?, ?, ?, 'pending', ?, ?, ?)
"""
SQL_INSERT_WAIT_TOKEN = "INSERT INTO wait_tokens (token_digest, wait_id) VALUES (?, ?)"
# The run's pending waits, found by the run alone (no index serves the status check; see 0013).
SQL_CANCEL_WAITS = """
UPDATE waits SET status = 'cancelled', resolved_at = ? WHERE run_id = ? AND status || '' = 'pending'
"""
# A run's state in one statement (one snapshot, one round trip; migration 0015): each row is a
# step, a wait or a checkpoint of the run, told apart by column 1 (see _pg_tx._add_state_row).
SQL_STATE = "SELECT * FROM pyworkflow_run_states(?::text)"
SQL_GET_RUN = f"SELECT {RUN_COLUMNS} FROM runs WHERE id = ?"
SQL_EVENTS = """
SELECT run_id, seq, at, type, key, data FROM events WHERE run_id = ? AND seq > ? ORDER BY seq LIMIT ?
"""

# The hot turn writes, one statement each (migration 0002): they return 'ok' or why they refused.
SQL_FN_COMPLETE_STEP = "SELECT pyworkflow_complete_step(?, ?, ?, ?, ?)"
SQL_FN_SAVE_CHECKPOINT = "SELECT pyworkflow_save_checkpoint(?, ?, ?, ?, ?, ?, ?)"
SQL_FN_DELETE_CHECKPOINT = "SELECT pyworkflow_delete_checkpoint(?, ?, ?, ?, ?)"  # migration 0016
SQL_FN_SUSPEND_RUN = "SELECT pyworkflow_suspend_run(?, ?, ?, ?::text[], ?::text[], ?::integer[], ?)"
SQL_FN_FINISH_RUN = "SELECT pyworkflow_finish_run(?, ?, ?, ?, ?)"
SQL_FN_CREATE_WAIT = "SELECT pyworkflow_create_wait(?, ?, ?, ?, ?, ?, ?, ?, ?, ?, ?)"
# A wait the turn suspends on, with the suspension's status and event; then the rest of the
# suspension, written without a caller waiting (migration 0018).
SQL_FN_CREATE_WAIT_SUSPENDING = "SELECT pyworkflow_create_wait_suspending(?, ?, ?, ?, ?, ?, ?, ?, ?, ?, ?)"
SQL_FN_END_SUSPENDED_TURN = (
    "SELECT pyworkflow_end_suspended_turn(?, ?, ?, ?::text[], ?::text[], ?::integer[], ?)"
)
SQL_FN_EXPIRE_DUE_WAITS = "SELECT pyworkflow_expire_due_waits(?::double precision, ?::integer)"
# A decision that leaves its run to any runtime (migrations 0004, 0017: it NOTIFYs).
SQL_FN_RESOLVE_WAIT = "SELECT pyworkflow_resolve_wait(?, ?, ?, ?)"
# A decision that claims the run it woke, with its state (migration 0017): the outcome, then the
# columns of SQL_FN_CLAIM_WITH_STATES.
SQL_FN_RESOLVE_WAIT_AND_CLAIM = """
SELECT * FROM pyworkflow_resolve_wait_and_claim(
    ?::text, ?::text, ?::bytea, ?::double precision, ?::text, ?::double precision, ?::integer)
"""
# A decision by token (migration 0021): the wait's lookup, the decision and, with an owner, the
# claim as above in one statement; the outcome, the wait's TOKEN_WAIT_COLUMNS, then the claim's.
SQL_FN_RESOLVE_TOKEN = """
SELECT * FROM pyworkflow_resolve_token(
    ?::bytea, ?::bytea, ?::double precision, ?::text, ?::double precision, ?::integer)
"""
TOKEN_WAIT_COLUMNS = 13  # WAIT_COLUMNS
# Every claim with the state of the runs it resumes, in one statement (migration 0015): the
# runtime's tick ('poll': expire due waits, claim, then a row with c_run NULL carrying the next
# due time), a Celery turn's claim of one run ('run'), a claim of up to N runs ('claim'). Each
# goes through pyworkflow_claim_row (migration 0008: the crash limit once).
SQL_FN_CLAIM_WITH_STATES = """
SELECT * FROM pyworkflow_claim_with_states(
    ?::text, ?::text, ?::text, ?::integer, ?::double precision, ?::double precision, ?::integer)
"""
# A cancellation (pyworkflow_end_run, as every end of a run), one statement.
SQL_FN_CANCEL_RUN = "SELECT pyworkflow_cancel_run(?::text, ?::double precision)"
# The fence of a multi-statement transition: the run's lock and the epoch check (migration 0002).
SQL_FN_FENCE = "SELECT pyworkflow_fence(?::text, ?::integer)"
