-- The queue as a WITHOUT ROWID table: its rows are stored in the b-tree of their primary key
-- (run_id) instead of a rowid table beside an index of run_id, so every write of a queue row (a
-- run's creation, a claim, the end of a turn, a run's end) changes one page fewer. One at a time
-- each of those is a commit of its own, and each page a commit writes is a WAL frame written,
-- checksummed and synced: a run's creation wrote 8.4 frames and now 7.4, the end of a suspended
-- turn 5.0 and now 4.0, a decision with its claim 10.4 and now 9.4, a run's end 8.4 and now 7.4;
-- a HITL run's 48.1 frames are 44.1 (python -m bench.wal_frames; bench/README.md). The rows are
-- small (no blobs), as WITHOUT ROWID wants.
--
-- A table is rebuilt, as SQLite rebuilds one: a new table, the rows copied, the old one dropped
-- with its indexes, the new one renamed, the indexes made again. An index another component made
-- on the queue (atfgraph's queue_leases) goes with the old table: that component's next
-- migration makes it again (atfgraph 0015, in the same transaction when both are pending).
CREATE TABLE queue_without_rowid (
    run_id           TEXT PRIMARY KEY,
    available_at     REAL    NOT NULL,
    wake_seq         INTEGER NOT NULL DEFAULT 0,
    epoch            INTEGER NOT NULL DEFAULT 0,
    lease_owner      TEXT,
    lease_expires_at REAL,
    crashes          INTEGER NOT NULL DEFAULT 0,
    node_id          TEXT
) WITHOUT ROWID;
INSERT INTO queue_without_rowid (run_id, available_at, wake_seq, epoch, lease_owner, lease_expires_at,
                                 crashes, node_id)
SELECT run_id, available_at, wake_seq, epoch, lease_owner, lease_expires_at, crashes, node_id FROM queue;
DROP TABLE queue;
ALTER TABLE queue_without_rowid RENAME TO queue;
CREATE INDEX queue_ready ON queue (node_id, available_at);
CREATE INDEX queue_local_leases ON queue (node_id, lease_expires_at) WHERE lease_expires_at IS NOT NULL;
