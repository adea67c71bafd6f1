-- The indexes the metrics' scrape-time reads walk (pyworkflow.store._metrics), so that a scrape
-- counts from indexes and never reads the tables' rows. Runs by status come from runs_by_status;
-- the traversers among them (runs with a node_id) from this partial index, which pyworkflow's own
-- runs never enter (SQLite counts a partial index as covering only when it holds the columns of
-- its predicate too):
CREATE INDEX runs_remote_by_status ON runs (status, node_id) WHERE node_id IS NOT NULL;
-- pending waits by kind, with the creation time of the oldest of each (status last, for SQLite
-- as above)
CREATE INDEX waits_pending_by_kind ON waits (kind, created_at, status) WHERE status = 'pending';
