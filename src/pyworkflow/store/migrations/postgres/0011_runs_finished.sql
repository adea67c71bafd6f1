-- Retention (pyworkflow.store._retention): finished runs by the time they finished, so that a
-- purge walks the oldest first and a pass with nothing to delete reads one index entry. Runs
-- that have not finished (finished_at NULL) never enter it.
CREATE INDEX runs_finished ON runs (finished_at) WHERE finished_at IS NOT NULL;
