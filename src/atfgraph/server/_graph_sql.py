"""The graph store's statements, one per purpose, each saying what it is for and which index serves
it (see migrations/<dialect>/). Written once for both dialects: SQLite's ``?`` placeholders, and
row-lock hints as SQL comments (``/*FOR UPDATE*/``, ``/*FOR UPDATE SKIP LOCKED*/``) that the
kit's PostgreSQL database turns into clauses and SQLite ignores (it has one writer)."""

from __future__ import annotations

# -- traversers -------------------------------------------------------------------------------

# Create a traverser, queued for its first claim; nothing when its idempotency key is taken (a
# submission that raced ours on another server committed first: the caller reads that one).
SQL_INSERT_TRAVERSER = """
INSERT INTO atfg_traversers (id, target, node_id, skill, status, input, max_attempts,
                             idempotency_key, available_at, created_at, updated_at)
VALUES (?, ?, ?, ?, 'queued', ?, ?, ?, ?, ?, ?)
ON CONFLICT (idempotency_key) DO NOTHING
"""
# An earlier submission with the same idempotency key (its UNIQUE index).
SQL_TRAVERSER_BY_KEY = "SELECT * FROM atfg_traversers WHERE idempotency_key = ?"
# One traverser by id (API reads, and the state check of every transition).
SQL_GET_TRAVERSER = "SELECT * FROM atfg_traversers WHERE id = ?"
# The same, locked for the transition that reads it (PostgreSQL; SQLite has one writer).
SQL_LOCK_TRAVERSER = "SELECT * FROM atfg_traversers WHERE id = ? /*FOR UPDATE*/"
# Claims: the oldest queued traversers of a node that this worker's version may run (a traverser
# is pinned to the version of its first claim). Served by the partial index atfg_traversers_ready.
SQL_READY = """
SELECT id FROM atfg_traversers
WHERE status = 'queued' AND node_id = ? AND available_at <= ? AND (version IS NULL OR version = ?)
ORDER BY available_at LIMIT ? /*FOR UPDATE SKIP LOCKED*/
"""
# Take a lease: a new attempt under a new epoch (the fence every later write must carry).
SQL_CLAIM = """
UPDATE atfg_traversers
SET status = 'running', attempt = attempt + 1, epoch = epoch + 1, version = COALESCE(version, ?),
    lease_worker = ?, lease_expires_at = ?, updated_at = ?
WHERE id = ? AND status = 'queued'
"""
# Heartbeat: extend a lease this worker still holds.
SQL_RENEW = """
UPDATE atfg_traversers SET lease_expires_at = ?
WHERE id = ? AND epoch = ? AND lease_worker = ? AND status = 'running'
"""
# Pause: close the lease and wait for the named approval.
SQL_PAUSE = """
UPDATE atfg_traversers
SET status = 'waiting', waiting_on = ?, lease_worker = NULL, lease_expires_at = NULL, updated_at = ?
WHERE id = ? AND epoch = ? AND status = 'running'
"""
# Continuation after a decision or an expiry: queued again, with one more attempt allowed so the
# pause does not consume the failure-retry budget.
SQL_CONTINUE = """
UPDATE atfg_traversers
SET status = 'queued', waiting_on = NULL, max_attempts = max_attempts + 1, available_at = ?, updated_at = ?
WHERE id = ? AND status = 'waiting' AND waiting_on = ?
"""
# End an attempt with a terminal outcome.
SQL_FINISH = """
UPDATE atfg_traversers
SET status = ?, result = ?, error = ?, lease_worker = NULL, lease_expires_at = NULL,
    updated_at = ?, finished_at = ?
WHERE id = ?
"""
# End an attempt and queue another (retry, lease expiry, release). ``max_attempts`` grows by the
# last parameter: 1 when the attempt is not to be charged (a release on shutdown), else 0.
SQL_REQUEUE = """
UPDATE atfg_traversers
SET status = 'queued', error = ?, lease_worker = NULL, lease_expires_at = NULL,
    max_attempts = max_attempts + ?, available_at = ?, updated_at = ?
WHERE id = ?
"""
# A stopping worker's leases (it holds none it knows of by then; any left were claimed in a
# response it never read). Scans only running traversers (atfg_traversers_leases).
SQL_LEASES_OF_WORKER = """
SELECT id, node_id FROM atfg_traversers
WHERE status = 'running' AND lease_expires_at IS NOT NULL AND lease_worker = ? /*FOR UPDATE*/
"""
# The reaper: leases that ran out (their worker died or hung), via atfg_traversers_leases.
SQL_EXPIRED_LEASES = """
SELECT id, node_id, attempt, max_attempts FROM atfg_traversers
WHERE status = 'running' AND lease_expires_at < ? ORDER BY lease_expires_at LIMIT ? /*FOR UPDATE SKIP LOCKED*/
"""
# Listing by status, newest last (atfg_traversers_by_status).
SQL_LIST_TRAVERSERS = "SELECT * FROM atfg_traversers WHERE status = ? ORDER BY created_at DESC LIMIT ?"

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

# -- approvals --------------------------------------------------------------------------------

SQL_INSERT_APPROVAL = """
INSERT INTO atfg_approvals
    (id, traverser_id, operation_key, prompt, checkpoint, status, created_at, expires_at)
VALUES (?, ?, ?, ?, ?, 'pending', ?, ?)
"""
SQL_GET_APPROVAL = "SELECT * FROM atfg_approvals WHERE id = ?"
SQL_LOCK_APPROVAL = "SELECT * FROM atfg_approvals WHERE id = ? /*FOR UPDATE*/"
# Identity lookup (the UNIQUE (traverser_id, operation_key) index).
SQL_APPROVAL_BY_KEY = "SELECT * FROM atfg_approvals WHERE traverser_id = ? AND operation_key = ?"
SQL_APPROVALS_OF = "SELECT * FROM atfg_approvals WHERE traverser_id = ? ORDER BY created_at"
# The single transition out of 'pending': the conditional update is the race's only winner.
SQL_DECIDE = """
UPDATE atfg_approvals SET status = ?, decided_by = ?, response = ?, decided_at = ?
WHERE id = ? AND status = 'pending'
"""
# A cancelled traverser will never read its pending approvals: take them out of the inbox.
SQL_EXPIRE_APPROVALS_OF = """
UPDATE atfg_approvals SET status = 'expired', decided_by = 'system:cancelled', decided_at = ?
WHERE traverser_id = ? AND status = 'pending'
"""
# The inbox, oldest first (atfg_approvals_pending).
SQL_PENDING_APPROVALS = "SELECT * FROM atfg_approvals WHERE status = 'pending' ORDER BY created_at LIMIT ?"
# Every approval, or those in one status, oldest first (atfg_approvals_by_created,
# atfg_approvals_by_status): the status is a condition, so LIMIT counts only matching rows.
SQL_ALL_APPROVALS = "SELECT * FROM atfg_approvals ORDER BY created_at LIMIT ?"
SQL_APPROVALS_IN_STATUS = "SELECT * FROM atfg_approvals WHERE status = ? ORDER BY created_at LIMIT ?"
# The sweeper: pending approvals past their deadline (atfg_approvals_due).
SQL_DUE_APPROVALS = """
SELECT id FROM atfg_approvals
WHERE status = 'pending' AND expires_at IS NOT NULL AND expires_at <= ? ORDER BY expires_at LIMIT ?
/*FOR UPDATE SKIP LOCKED*/
"""

# -- workers ----------------------------------------------------------------------------------

SQL_INSERT_WORKER = """
INSERT INTO atfg_workers (id, node_id, version, capacity, registered_at, last_seen) VALUES (?, ?, ?, ?, ?, ?)
"""
SQL_GET_WORKER = "SELECT * FROM atfg_workers WHERE id = ?"
SQL_WORKER_SEEN = "UPDATE atfg_workers SET last_seen = ?, stats = COALESCE(?, stats) WHERE id = ?"
SQL_WORKERS = "SELECT * FROM atfg_workers ORDER BY registered_at DESC LIMIT ?"

#: Rows the sweeper settles per pass (the rest wait for the next pass).
SWEEP_BATCH = 500
#: The checkpoint scope of a traverser's handler (the run itself, not one of its steps).
TRAVERSER_SCOPE = ""

# -- the review console's reads (not a hot path; each bounded by its LIMIT) -----------------

#: Traversers for the console's Runs page: any combination of status, node and a creation-time
#: window, newest first; only the filters given become conditions. With a status the planner
#: uses atfg_traversers_by_status, otherwise atfg_traversers_by_created (bounded by LIMIT).
SQL_CONSOLE_TRAVERSERS = "SELECT * FROM atfg_traversers{where} ORDER BY created_at DESC LIMIT ?"
CONSOLE_FILTERS = ("status = ?", "node_id = ?", "created_at >= ?", "created_at < ?")
#: The Policies page: pending approvals oldest first (atfg_approvals_pending), each with the
#: traverser it pauses (primary key lookup).
SQL_CONSOLE_PENDING = """
SELECT a.*, t.target AS t_target, t.node_id AS t_node_id, t.status AS t_status, t.attempt AS t_attempt
FROM atfg_approvals a JOIN atfg_traversers t ON t.id = a.traverser_id
WHERE a.status = 'pending' ORDER BY a.created_at LIMIT ?
"""
#: The Policies page: the latest decisions (approved, rejected, expired), newest first. Not an
#: indexed read (no index on decided_at): the console is not a hot path and LIMIT bounds it.
SQL_CONSOLE_DECIDED = """
SELECT a.*, t.target AS t_target, t.node_id AS t_node_id, t.status AS t_status, t.attempt AS t_attempt
FROM atfg_approvals a JOIN atfg_traversers t ON t.id = a.traverser_id
WHERE a.status != 'pending' ORDER BY a.decided_at DESC LIMIT ?
"""
#: A run's checkpoints with the time of their last write (for its timeline).
SQL_CONSOLE_CHECKPOINTS = """
SELECT name, value, revision, updated_at FROM checkpoints
WHERE run_id = ? AND scope = ? ORDER BY updated_at
"""
