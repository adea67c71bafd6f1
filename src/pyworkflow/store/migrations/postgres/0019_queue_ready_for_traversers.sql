-- queue_ready (node_id, available_at) is walked only by the traversers' claims (node_id = a
-- node's id); pyworkflow's own rows (node_id IS NULL) are walked by queue_local_ready and
-- queue_local_leases since migration 0013. Their entries here were written and never read: an
-- index insertion for every version of a pyworkflow queue row (created, claimed, woken) and, on
-- PostgreSQL, a dead entry until a vacuum after the row goes (about 80 bytes per run parked by
-- bench.parked, as parked). The index keeps its name and columns and holds the traversers only;
-- a claim's "node_id = $1" implies the index's condition, generic plans included. SQLite's
-- copy stays whole: its next-due lookup walks it with node_id IS NULL (SQLite takes that as
-- fixing the leading column), and a dead entry costs SQLite nothing once the row is deleted.
DROP INDEX queue_ready;
CREATE INDEX queue_ready ON queue (node_id, available_at) WHERE node_id IS NOT NULL;
