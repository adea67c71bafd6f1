-- pyworkflow's SQLite migration 0009 rebuilt the queue as a WITHOUT ROWID table, and the indexes
-- of the old table went with it, this component's queue_leases (0006) among them: made again. A
-- database created after that migration has it from 0006 already.
CREATE INDEX IF NOT EXISTS queue_leases ON queue (lease_expires_at) WHERE lease_owner IS NOT NULL;
