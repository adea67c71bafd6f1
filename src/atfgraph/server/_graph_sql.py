"""The graph store's statements, one per purpose, each saying what it is for and which index serves
it (see migrations/<dialect>/). Written once for both dialects: SQLite's ``?`` placeholders, and
row-lock hints as SQL comments (``/*FOR UPDATE*/``, ``/*FOR UPDATE SKIP LOCKED*/``) that the
kit's PostgreSQL database turns into clauses and SQLite ignores (it has one writer)."""

from __future__ import annotations

# -- traversers: runs served by remote workers ------------------------------------------------
#
# A traverser is a run of the engine's runs table with a node_id (pyworkflow's runtimes never
# touch such a run's queue row); its lease is its queue row's (lease_owner = the worker, epoch
# the fence), and the row exists while the run is queued or running. Every statement below reads
# a traverser through TRAVERSER_ROW, which gives the engine's columns the API's names and its
# statuses (pending -> queued, suspended -> waiting, completed -> succeeded). The run's runs row is
# its lock: a transition locks it first (PostgreSQL; SQLite has one writer), then changes its
# queue row, steps, checkpoints or waits.

#: A traverser as the API names its fields (a LEFT JOIN: a waiting or finished run has no queue row).
TRAVERSER_ROW = """
SELECT r.id, r.workflow AS target, r.node_id, r.version,
       CASE r.status WHEN 'pending' THEN 'queued' WHEN 'suspended' THEN 'waiting'
                     WHEN 'completed' THEN 'succeeded' ELSE r.status END AS status,
       r.input, r.result, r.error, r.attempt, r.max_attempts, q.epoch, q.lease_owner AS lease_worker,
       q.lease_expires_at, r.waiting_on, r.created_at, r.updated_at, r.finished_at
FROM runs r LEFT JOIN queue q ON q.run_id = r.id
"""
#: The API's traverser statuses as the engine records them.
ENGINE_STATUS = {
    "queued": "pending",
    "running": "running",
    "waiting": "suspended",
    "succeeded": "completed",
    "failed": "failed",
    "cancelled": "cancelled",
}

# Create a traverser, queued for its first claim; nothing when its idempotency key is taken (a
# submission that raced ours on another server committed first: the caller reads that one). The
# conflict target names the condition of runs_by_idempotency_key (keyed runs only, pyworkflow
# migration sqlite 0008).
SQL_INSERT_TRAVERSER = """
INSERT INTO runs (id, workflow, status, input, node_id, attempt, max_attempts, idempotency_key,
                  created_at, updated_at)
VALUES (?, ?, 'pending', ?, ?, 0, ?, ?, ?, ?)
ON CONFLICT (idempotency_key) WHERE idempotency_key IS NOT NULL DO NOTHING
"""
# Its queue row: due now, claimable by the node's workers. epoch = attempt (0) here and on every
# row created later for the run (the engine's wake), so the fence only grows.
SQL_QUEUE_TRAVERSER = "INSERT INTO queue (run_id, available_at, epoch, node_id) VALUES (?, ?, 0, ?)"
# The trace carrier a traced submission stores with its run, and reads of it (primary key):
# by a decision, and for claimed tasks (server/_tracing.py).
SQL_SET_TRACE_CONTEXT = "UPDATE runs SET trace_context = ? WHERE id = ?"
SQL_TRACE_CONTEXT = "SELECT trace_context FROM runs WHERE id = ?"
# An earlier submission with the same idempotency key (runs_by_idempotency_key).
SQL_TRAVERSER_BY_KEY = TRAVERSER_ROW + "WHERE r.idempotency_key = ?"
# One traverser by id (API reads, and the state check of every transition).
SQL_GET_TRAVERSER = TRAVERSER_ROW + "WHERE r.id = ? AND r.node_id IS NOT NULL"
# The same, with the run's lock, for the transition that reads it.
SQL_LOCK_TRAVERSER = SQL_GET_TRAVERSER + " /*FOR UPDATE OF r*/"
# Whether a traverser exists (primary key).
SQL_TRAVERSER_EXISTS = "SELECT node_id FROM runs WHERE id = ? AND node_id IS NOT NULL"
# Claims: the oldest unleased queue rows of a node whose runs this worker's version may run (a
# traverser is pinned to the version of its first claim), walking queue_ready (node_id,
# available_at); rows and runs another server holds are skipped.
SQL_READY = """
SELECT q.run_id FROM queue q JOIN runs r ON r.id = q.run_id
WHERE q.node_id = ? AND q.available_at <= ? AND q.lease_owner IS NULL AND r.status = 'pending'
  AND (r.version IS NULL OR r.version = ?)
ORDER BY q.available_at LIMIT ? /*FOR UPDATE OF q, r SKIP LOCKED*/
"""
# Take a lease: a new attempt (pinning the version) ...
SQL_CLAIM = """
UPDATE runs SET status = 'running', attempt = attempt + 1, version = COALESCE(version, ?), updated_at = ?
WHERE id = ? AND status = 'pending'
"""
# ... under a new epoch, the fence every later write of the attempt must carry.
SQL_LEASE = "UPDATE queue SET epoch = epoch + 1, lease_owner = ?, lease_expires_at = ? WHERE run_id = ?"
# Heartbeat: extend a lease this worker still holds (queue_by_owner finds the row's owner).
SQL_RENEW = """
UPDATE queue SET lease_expires_at = ?
WHERE run_id = ? AND epoch = ? AND lease_owner = ? AND node_id IS NOT NULL
"""
# Pause: the run waits for the named approval, and holds nothing (its queue row goes).
SQL_PAUSE = """
UPDATE runs SET status = 'suspended', waiting_on = ?, updated_at = ? WHERE id = ? AND status = 'running'
"""
SQL_DROP_QUEUE_ROW = "DELETE FROM queue WHERE run_id = ?"
# End an attempt with a terminal outcome (status as the engine records it); the queue row goes.
SQL_FINISH = "UPDATE runs SET status = ?, result = ?, error = ?, updated_at = ?, finished_at = ? WHERE id = ?"
# End an attempt and queue another (retry, lease expiry, release). ``max_attempts`` grows by the
# second parameter: 1 when the attempt is not to be charged (a release on shutdown), else 0 ...
# A retry of a failed traverser: queued again with one more attempt allowed; its checkpoints,
# recorded steps and decided approvals stay, so the handler starts from them.
SQL_RETRY = """
UPDATE runs SET status = 'pending', error = NULL, result = NULL, finished_at = NULL,
               max_attempts = attempt + 1, updated_at = ?
WHERE id = ? AND status = 'failed'
"""
# ... and its queue row for the node's workers, fenced at the last attempt (a claim goes above).
SQL_QUEUE_RETRY = "INSERT INTO queue (run_id, available_at, epoch, node_id) VALUES (?, ?, ?, ?)"
SQL_REQUEUE = """
UPDATE runs SET status = 'pending', error = ?, max_attempts = max_attempts + ?, updated_at = ? WHERE id = ?
"""
# ... and its queue row is unleased and due now.
SQL_UNLEASE = (
    "UPDATE queue SET lease_owner = NULL, lease_expires_at = NULL, available_at = ? WHERE run_id = ?"
)
# A stopping worker's leases (it holds none it knows of by then; any left were claimed in a
# response it never read), via queue_by_owner; the runs are locked, in id order.
SQL_LEASES_OF_WORKER = """
SELECT q.run_id, q.node_id FROM queue q JOIN runs r ON r.id = q.run_id
WHERE q.lease_owner = ? AND q.node_id IS NOT NULL ORDER BY q.run_id /*FOR UPDATE OF r*/
"""
# The reaper: remote leases that ran out (their worker died or hung), via queue_leases.
SQL_EXPIRED_LEASES = """
SELECT q.run_id, q.node_id, r.attempt, r.max_attempts FROM queue q JOIN runs r ON r.id = q.run_id
WHERE q.lease_owner IS NOT NULL AND q.lease_expires_at < ? AND q.node_id IS NOT NULL
ORDER BY q.lease_expires_at LIMIT ? /*FOR UPDATE OF r SKIP LOCKED*/
"""
# Whether the sweeper has anything to do by a time (each ?): the first escalation due
# (atfg_assignments_escalating), the first deadline (waits_due) and the first remote lease to run
# out (queue_leases), each the first entry of its index in order (a NULL: none); an idle server's
# sweep is this one read. Written ORDER BY ... LIMIT 1: as MIN(), a generic plan made while
# ``waits`` had no statistics (a new database) read every pending wait (waits_pending_by_kind).
SQL_SWEEP_DUE = """
SELECT (SELECT escalate_at FROM atfg_assignments WHERE escalate IS NOT NULL AND escalate_at IS NOT NULL
     ORDER BY escalate_at LIMIT 1) <= ?,
    (SELECT expires_at FROM waits WHERE status = 'pending' AND expires_at IS NOT NULL
     ORDER BY expires_at LIMIT 1) <= ?,
    (SELECT lease_expires_at FROM queue WHERE lease_owner IS NOT NULL AND node_id IS NOT NULL
     ORDER BY lease_expires_at LIMIT 1) < ?
"""
# Listing by status (as the engine records it), newest first (runs_by_status), then by id;
# ``{where}`` is the cursor's condition, ``{order}`` its order (``_paging.keyset``).
SQL_LIST_TRAVERSERS = TRAVERSER_ROW + "WHERE r.status = ? AND r.node_id IS NOT NULL{where}{order} LIMIT ?"
# Nodes with work due for their workers (after the sweeper continued traversers): each node in
# the queue found by one step of queue_ready (the next node id after the last), then its first
# due unleased row, walking queue_ready in order (a bitmap scan would read every due row). As a
# DISTINCT over the due rows, a backlog of queued traversers was read whole in the sweep's
# transaction each time a deadline fell due (tests/migration/test_sweep_plans.py).
SQL_NODES_WITH_WORK = """
WITH RECURSIVE nodes (node_id) AS (
    SELECT (SELECT node_id FROM queue WHERE node_id IS NOT NULL ORDER BY node_id LIMIT 1)
    UNION ALL
    SELECT (SELECT q.node_id FROM queue q WHERE q.node_id > nodes.node_id ORDER BY q.node_id LIMIT 1)
    FROM nodes WHERE nodes.node_id IS NOT NULL
)
SELECT nodes.node_id FROM nodes WHERE nodes.node_id IS NOT NULL AND (
    SELECT 1 FROM queue q WHERE q.node_id = nodes.node_id AND q.lease_owner IS NULL AND q.available_at <= ?
    ORDER BY q.available_at LIMIT 1) IS NOT NULL
"""

# -- steps, checkpoints, memory ---------------------------------------------------------------

# A traverser's child steps are its run's step records in the engine's steps table, with their
# place in its path (seq) and the target they ran; a completed one is replayed, never re-run.
# Record one; a step already recorded is never overwritten (replay returns it).
SQL_INSERT_STEP = """
INSERT INTO steps (run_id, step_key, seq, target, status, attempt, result, error, updated_at)
VALUES (?, ?, ?, ?, ?, ?, ?, ?, ?)
ON CONFLICT (run_id, step_key) DO NOTHING
"""
# A traverser's steps in path order (primary key prefix); a child step is written once, so its
# updated_at is when it was recorded.
SQL_STEPS = """
SELECT step_key, seq, target, status, attempt, result, error, updated_at AS created_at
FROM steps WHERE run_id = ? ORDER BY seq, updated_at
"""
# A traverser's checkpoints are its run's, in the engine's checkpoints table at scope
# TRAVERSER_SCOPE (pyworkflow's steps use their step keys); written by the kit's
# compare-and-set rule (``write_checkpoint``).
SQL_CHECKPOINTS = "SELECT name, value, revision FROM checkpoints WHERE run_id = ? AND scope = ''"
SQL_GET_CHECKPOINT = "SELECT value, revision FROM checkpoints WHERE run_id = ? AND scope = '' AND name = ?"
SQL_GET_MEMORY = "SELECT value, revision FROM atfg_memory WHERE scope = ? AND key = ?"
# Compare-and-set: the update applies only while the stored revision is the one read (the last
# parameter), so two writers racing on one key (servers sharing PostgreSQL, no lease to lock)
# cannot both succeed; the loser changes nothing and gets a conflict.
SQL_UPSERT_MEMORY = """
INSERT INTO atfg_memory (scope, key, value, revision, updated_at) VALUES (?, ?, ?, ?, ?)
ON CONFLICT (scope, key) DO UPDATE SET value = excluded.value, revision = excluded.revision,
    updated_at = excluded.updated_at
WHERE atfg_memory.revision = ?
"""

# -- approvals: waits of kind 'approval' -------------------------------------------------------
#
# An approval is a wait of its traverser's run, identified by (run, operation key) as its
# wait_key: pending -> received (with a decision, approved or rejected, who made it and the
# response as its payload) | expired (its deadline; the engine's sweeper) | cancelled (its run
# was). APPROVAL_ROW gives it the API's names and statuses (a cancelled one reads as expired,
# decided by system:cancelled).

APPROVAL_ROW = """
SELECT w.id, w.run_id AS traverser_id, w.wait_key AS operation_key,
       CASE w.status WHEN 'received' THEN w.decision WHEN 'cancelled' THEN 'expired' ELSE w.status END
           AS status,
       w.prompt, w.checkpoint,
       COALESCE(w.decided_by, CASE w.status WHEN 'expired' THEN 'system:expiry'
                                            WHEN 'cancelled' THEN 'system:cancelled' END) AS decided_by,
       w.payload AS response, w.created_at, w.expires_at, w.resolved_at AS decided_at,
       w.payload_schema AS response_schema
FROM waits w
"""
SQL_INSERT_APPROVAL = """
INSERT INTO waits (id, run_id, wait_key, kind, name, step_key, status, created_at, expires_at, prompt,
                   checkpoint, payload_schema)
VALUES (?, ?, ?, 'approval', ?, '', 'pending', ?, ?, ?, ?, ?)
"""
# An approval found by its key (id, or run and operation key, or run): its kind is tested on the
# row found, written so that no index can serve the test. With ``w.kind = 'approval'``
# PostgreSQL's planner could choose waits_by_kind (kind, status, created_at) over the key's index
# on a new database, whose tables have no statistics yet, keep that plan for the connection, and
# scan every approval on each lookup (PostgreSQL migration 0015 says what it cost). Searches by
# kind (the approval lists, the inbox) keep the plain test, which waits_by_kind is there to serve.
IS_APPROVAL = "w.kind || '' = 'approval'"
SQL_GET_APPROVAL = APPROVAL_ROW + f"WHERE w.id = ? AND {IS_APPROVAL}"
# What a decision reads before its transaction: the response schema, and whether the approval is
# assigned (the transaction checks the assignment again). One statement, by primary keys.
SQL_DECISION_TERMS = (
    "SELECT w.payload_schema, EXISTS (SELECT 1 FROM atfg_assignments a WHERE a.wait_id = w.id) "
    f"FROM waits w WHERE w.id = ? AND {IS_APPROVAL}"
)
# The approval with its run's lock (the run is what a decision changes) and its own row's, so
# that a decision that waited for another reads the approval as that one left it.
SQL_LOCK_APPROVAL = (
    APPROVAL_ROW + f"JOIN runs r ON r.id = w.run_id WHERE w.id = ? AND {IS_APPROVAL} /*FOR UPDATE OF r, w*/"
)
# Identity lookup (the UNIQUE (run_id, wait_key) index).
SQL_APPROVAL_BY_KEY = APPROVAL_ROW + f"WHERE w.run_id = ? AND w.wait_key = ? AND {IS_APPROVAL}"
SQL_APPROVALS_OF = APPROVAL_ROW + f"WHERE w.run_id = ? AND {IS_APPROVAL} ORDER BY w.created_at"
# The approval list of GET /approvals, oldest first then by id, under the conditions given
# (``{where}``: status, traverser, operation key, time, the cursor; ``{order}``). Pending ones
# walk waits_pending; one traverser's the (run_id, wait_key) index; else waits_by_kind. Every
# condition is on the row, so LIMIT counts only matching approvals.
SQL_LIST_APPROVALS = APPROVAL_ROW + "WHERE w.kind = 'approval'{where}{order} LIMIT ?"
# The single transition out of 'pending': the conditional update is the race's only winner.
SQL_DECIDE = """
UPDATE waits SET status = 'received', decision = ?, decided_by = ?, payload = ?, resolved_at = ?
WHERE id = ? AND status = 'pending'
"""
# A cancelled traverser will never read its pending waits: they leave the inbox. Found by the run
# alone: no index serves the status check (a bitmap of waits_pending would read every pending wait).
SQL_CANCEL_WAITS = (
    "UPDATE waits SET status = 'cancelled', resolved_at = ? WHERE run_id = ? AND status || '' = 'pending'"
)
#: The conditions (and parameters) of an API approval status on the waits table.
APPROVAL_STATUS_WHERE: dict[str, tuple[str, tuple[str, ...]]] = {
    "pending": ("w.status = ?", ("pending",)),
    "approved": ("w.status = ? AND w.decision = ?", ("received", "approved")),
    "rejected": ("w.status = ? AND w.decision = ?", ("received", "rejected")),
    "expired": ("w.status IN (?, ?)", ("expired", "cancelled")),
}

# -- workers ----------------------------------------------------------------------------------

SQL_INSERT_WORKER = """
INSERT INTO atfg_workers (id, node_id, version, capacity, registered_at, last_seen, token_id)
VALUES (?, ?, ?, ?, ?, ?, ?)
"""
SQL_GET_WORKER = "SELECT * FROM atfg_workers WHERE id = ?"
SQL_WORKER_SEEN = "UPDATE atfg_workers SET last_seen = ?, stats = COALESCE(?, stats) WHERE id = ?"
# Newest registration first, then by id (``{where}``: the cursor's condition).
SQL_WORKERS = "SELECT * FROM atfg_workers WHERE 1 = 1{where}{order} LIMIT ?"

#: Rows the sweeper settles per pass (the rest wait for the next pass).
SWEEP_BATCH = 500
#: The checkpoint scope of a traverser's handler (the run itself, not one of its steps).
TRAVERSER_SCOPE = ""

# -- the review console's reads (not a hot path; each bounded by its LIMIT) -----------------

#: The conditions of the console's Runs page filters (status as the engine records it, node, a
#: creation-time window), added to ``_runs_reads.SQL_RUNS``: only the filters given become
#: conditions; runs_by_status or runs_by_created, bounded by LIMIT.
CONSOLE_FILTERS = ("r.status = ?", "r.node_id = ?", "r.created_at >= ?", "r.created_at < ?")
_CONSOLE_APPROVAL = APPROVAL_ROW.replace(
    "FROM waits w",
    """, r.workflow AS t_target, r.node_id AS t_node_id,
       CASE r.status WHEN 'pending' THEN 'queued' WHEN 'suspended' THEN 'waiting'
                     WHEN 'completed' THEN 'succeeded' ELSE r.status END AS t_status, r.attempt AS t_attempt
FROM waits w JOIN runs r ON r.id = w.run_id""",
)
#: The Policies page: pending approvals oldest first (waits_pending), each with the traverser it
#: pauses (primary key lookup).
SQL_CONSOLE_PENDING = (
    _CONSOLE_APPROVAL + "WHERE w.status = 'pending' AND w.kind = 'approval' ORDER BY w.created_at LIMIT ?"
)
#: The Policies page: the latest decisions (approved, rejected, expired), newest first. Not an
#: indexed read: the console is not a hot path and LIMIT bounds it.
SQL_CONSOLE_DECIDED = (
    _CONSOLE_APPROVAL
    + "WHERE w.status != 'pending' AND w.kind = 'approval' ORDER BY w.resolved_at DESC LIMIT ?"
)
#: A run's checkpoints with the time of their last write (for its timeline).
SQL_CONSOLE_CHECKPOINTS = """
SELECT name, value, revision, updated_at FROM checkpoints
WHERE run_id = ? AND scope = ? ORDER BY updated_at
"""
