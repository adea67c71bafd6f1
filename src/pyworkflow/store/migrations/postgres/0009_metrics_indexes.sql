-- The indexes the metrics' scrape-time reads walk (pyworkflow.store._metrics), so that a scrape
-- counts from an index and never reads the tables' rows:
-- runs by status and kind (a run with a node_id is a traverser)
CREATE INDEX runs_by_kind ON runs (status, node_id);
-- pending waits by kind, with the creation time of the oldest of each (status last: SQLite
-- counts a partial index as covering only when it holds the columns of the predicate too)
CREATE INDEX waits_pending_by_kind ON waits (kind, created_at, status) WHERE status = 'pending';
