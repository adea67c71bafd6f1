-- One model: a traverser is a run of the engine's runs table served by remote workers (a
-- node_id; pyworkflow migration 0003 added the columns), its lease is its queue row's, and an
-- approval is a wait of kind 'approval'. Every row moves with its ids, times, attempts, epochs
-- and leases; the old tables go.
--
-- Statuses: queued -> pending, waiting -> suspended, succeeded -> completed (running, failed,
-- cancelled unchanged). A queued or running traverser keeps its queue row (its lease, epoch and
-- due time); a waiting or finished one holds none.
INSERT INTO runs (id, workflow, status, input, result, error, created_at, updated_at, finished_at,
                  node_id, version, attempt, max_attempts, idempotency_key, waiting_on)
SELECT id, target,
       CASE status WHEN 'queued' THEN 'pending' WHEN 'waiting' THEN 'suspended'
                   WHEN 'succeeded' THEN 'completed' ELSE status END,
       input, result, error, created_at, updated_at, finished_at,
       node_id, version, attempt, max_attempts, idempotency_key, waiting_on
FROM atfg_traversers;

INSERT INTO queue (run_id, available_at, wake_seq, epoch, lease_owner, lease_expires_at, crashes, node_id)
SELECT id, available_at, 0, epoch, lease_worker, lease_expires_at, 0, node_id
FROM atfg_traversers WHERE status IN ('queued', 'running');

-- Approvals: pending stays pending; approved and rejected are received with that decision;
-- expired by a deadline is expired; expired because its traverser was cancelled is cancelled.
-- decided_by, the response (payload) and the decision time (resolved_at) are kept.
INSERT INTO waits (id, run_id, wait_key, kind, name, step_key, status, created_at, expires_at,
                   resolved_at, payload, prompt, checkpoint, decision, decided_by)
SELECT id, traverser_id, operation_key, 'approval', operation_key, '',
       CASE status WHEN 'pending' THEN 'pending' WHEN 'approved' THEN 'received' WHEN 'rejected' THEN 'received'
                   WHEN 'expired' THEN CASE decided_by WHEN 'system:cancelled' THEN 'cancelled' ELSE 'expired' END
       END,
       created_at, expires_at, decided_at, response, prompt, checkpoint,
       CASE WHEN status IN ('approved', 'rejected') THEN status END, decided_by
FROM atfg_approvals;

DROP TABLE atfg_approvals;
DROP TABLE atfg_traversers;

-- The graph server's reaper: remote leases by deadline.
CREATE INDEX queue_leases ON queue (lease_expires_at) WHERE lease_owner IS NOT NULL;
-- Listing approvals (GET /approvals?status=...), oldest first.
CREATE INDEX waits_by_kind ON waits (kind, status, created_at);
