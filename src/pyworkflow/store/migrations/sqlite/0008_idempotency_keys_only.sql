-- runs_by_idempotency_key holds the runs that have a key (atfgraph's keyed submissions) and no
-- longer an entry for every other run: pyworkflow's runs and most traversers have none, and each
-- cost an index entry and, when it was created, one more page written with its commit. Lookups
-- by key ("idempotency_key = ?") imply the index's condition; an insert that names its conflict
-- target names the condition too (atfgraph's submission: ON CONFLICT (idempotency_key) WHERE
-- idempotency_key IS NOT NULL).
DROP INDEX runs_by_idempotency_key;
CREATE UNIQUE INDEX runs_by_idempotency_key ON runs (idempotency_key) WHERE idempotency_key IS NOT NULL;
