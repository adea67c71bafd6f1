-- A backlog in the queue (a million runs started at once, waiting for their first turn), or a
-- million runs parked with deadlines, no longer costs a read of all of them on every tick. Three
-- statements did that:
-- * pyworkflow_next_due took MIN(COALESCE(lease_expires_at, available_at)), which no index serves
--   (SQLite's migration 0007 changes its copy the same way): with 555,000 rows queued
--   (bench.parked) it took 233 ms a call, twice a tick;
-- * pyworkflow_claim walks queue_ready (node_id, available_at) with node_id IS NULL, and
--   PostgreSQL does not take an IS NULL condition as fixing the leading column, so it sorted every
--   due row by available_at to take the first few;
-- * pyworkflow_expire_due_waits (run by every tick that finds anything due) sorted every pending
--   deadline to take the due ones: with a million parked, half on a deadline, a resume took
--   133 ms instead of 7, and 1,000 deadlines falling due together were acted on up to 10.9 s late.
-- Now each walks an index in the order it needs and stops early: pyworkflow's own queue rows by
-- available_at (queue_local_ready, new), the leases by when they run out (queue_local_leases,
-- new), the pending deadlines by deadline (waits_due). The three functions pin that plan (no
-- sequential or bitmap scan while they run): the queue's size swings between empty and a backlog
-- faster than statistics follow (a server without autovacuum has none at all), and without them
-- the planner chose a bitmap scan of every matching row and a sort, for the same answer.
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

ALTER FUNCTION pyworkflow_expire_due_waits(double precision, integer) SET enable_seqscan = off;
ALTER FUNCTION pyworkflow_expire_due_waits(double precision, integer) SET enable_bitmapscan = off;

-- The end of a run cancels its pending waits, found by the run alone: written status = 'pending',
-- the condition let the planner (without statistics) AND the run's index with a bitmap of
-- waits_pending, every pending wait in the database: 30-60 ms a finished run with 300,000 parked.
-- The same rule as the graph store's approval lookups (docs/architecture.md, "Where SQL lives").
CREATE OR REPLACE FUNCTION pyworkflow_end_run(p_run text, p_status text, p_result bytea, p_error bytea,
                                              p_event text, p_now double precision) RETURNS void
LANGUAGE plpgsql AS $$
BEGIN
    UPDATE runs SET status = p_status, result = p_result, error = p_error, updated_at = p_now,
        finished_at = p_now
    WHERE id = p_run;
    UPDATE waits SET status = 'cancelled', resolved_at = p_now WHERE run_id = p_run AND status || '' = 'pending';
    DELETE FROM queue WHERE run_id = p_run;
    DELETE FROM checkpoints WHERE run_id = p_run AND scope <> '';
    PERFORM pyworkflow_event(p_run, p_now, p_event, NULL, p_error);
END $$;

-- Every turn inserts, updates and deletes queue rows: a queue is a table of dead row versions
-- unless it is vacuumed often, and an index scan of it walks them all. Vacuum and analyze it
-- after every 1,000 changes rather than after a fifth of its rows (the server's default), where
-- the server runs autovacuum.
ALTER TABLE queue SET (autovacuum_vacuum_scale_factor = 0, autovacuum_vacuum_threshold = 1000,
                       autovacuum_analyze_scale_factor = 0, autovacuum_analyze_threshold = 1000);
