-- Runs served by remote workers (atfgraph's traversers) and approvals, in the engine's tables.
--
-- A run with a node_id is served by remote workers of that node, which claim its queue row and
-- hold the lease over HTTP; pyworkflow's own runtimes (local, Celery) never claim, count or
-- lease such a row. Its attempts are counted on the run (attempt, max_attempts: every claim is
-- an attempt; a continuation after a pause adds one to max_attempts, so a pause is not an
-- attempt), the version of its first claim is pinned (continuations run on the same version),
-- and waiting_on names the wait its handler paused on. A run's queue row for a remote run is
-- created with epoch = attempt, so the fence keeps increasing across pauses.
ALTER TABLE runs ADD COLUMN node_id text;
ALTER TABLE runs ADD COLUMN version text;
ALTER TABLE runs ADD COLUMN attempt integer NOT NULL DEFAULT 0;
ALTER TABLE runs ADD COLUMN max_attempts integer;
ALTER TABLE runs ADD COLUMN idempotency_key text;
ALTER TABLE runs ADD COLUMN waiting_on text;
-- A caller-chosen key that makes a submission idempotent (NULLs are distinct).
CREATE UNIQUE INDEX runs_by_idempotency_key ON runs (idempotency_key);

-- The node whose remote workers may claim the row (NULL: pyworkflow's runtimes). Claims of
-- either kind walk queue_ready by (node_id, available_at).
ALTER TABLE queue ADD COLUMN node_id text;
DROP INDEX queue_ready;
CREATE INDEX queue_ready ON queue (node_id, available_at);

-- A wait of kind 'approval' is a request for a person's decision, identified by (run,
-- operation key) as its wait_key: its prompt and attached checkpoint, and once received the
-- decision ('approved' | 'rejected'), who made it, and the response (payload).
ALTER TABLE waits ADD COLUMN prompt bytea;
ALTER TABLE waits ADD COLUMN checkpoint bytea;
ALTER TABLE waits ADD COLUMN decision text;
ALTER TABLE waits ADD COLUMN decided_by text;
