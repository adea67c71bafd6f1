-- A backlog in the queue (a million runs started at once, waiting for their first turn) no longer
-- costs a read of the whole queue on every tick. Two statements did that:
-- * pyworkflow_next_due took MIN(COALESCE(lease_expires_at, available_at)), which no index serves
--   (SQLite's migration 0007 changes its copy the same way);
-- * pyworkflow_claim walks queue_ready (node_id, available_at) with node_id IS NULL, and
--   PostgreSQL does not take an IS NULL condition as fixing the leading column, so it sorted every
--   due row by available_at to take the first few.
-- With 555,000 rows queued (bench.parked) the first took 233 ms a call and a tick called it
-- twice. Now both walk indexes in the order they need and stop early: pyworkflow's own rows by
-- available_at (queue_local_ready), and the leases by when they run out (queue_local_leases). The two
-- functions also pin that plan (no sequential or bitmap scan while they run): a queue's size
-- swings between empty and a backlog faster than statistics follow (a server without autovacuum
-- has none at all), and without them the planner chose a bitmap scan of every matching row and a
-- sort, for the same answer.
CREATE INDEX queue_local_ready ON queue (available_at) WHERE node_id IS NULL;
CREATE INDEX queue_local_leases ON queue (lease_expires_at) WHERE node_id IS NULL AND lease_expires_at IS NOT NULL;

CREATE OR REPLACE FUNCTION pyworkflow_next_due() RETURNS double precision
LANGUAGE sql VOLATILE
SET enable_seqscan = off
SET enable_bitmapscan = off
AS $$
    SELECT LEAST(
        (SELECT available_at FROM queue WHERE node_id IS NULL AND lease_expires_at IS NULL
         ORDER BY available_at LIMIT 1),
        (SELECT lease_expires_at FROM queue WHERE node_id IS NULL AND lease_expires_at IS NOT NULL
         ORDER BY lease_expires_at LIMIT 1),
        (SELECT MIN(expires_at) FROM waits WHERE status = 'pending' AND expires_at IS NOT NULL))
$$;

ALTER FUNCTION pyworkflow_claim(text, integer, double precision, double precision, integer)
    SET enable_seqscan = off;
ALTER FUNCTION pyworkflow_claim(text, integer, double precision, double precision, integer)
    SET enable_bitmapscan = off;
