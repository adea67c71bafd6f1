-- The runtime's next due time without reading the whole queue. It was
-- MIN(COALESCE(lease_expires_at, available_at)), which no index serves: every tick read every
-- queue row, so a backlog of N runs waiting for their first turn (a million started at once) made
-- each tick cost O(N). It is now the earlier of two ordered lookups that stop at their first row:
-- the first unleased row by available_at (queue_ready, walking past the leased rows: at most the
-- runs running) and the first lease to run out (this index). The same rows give the same minimum.
CREATE INDEX queue_local_leases ON queue (node_id, lease_expires_at) WHERE lease_expires_at IS NOT NULL;
