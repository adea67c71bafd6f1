-- An escalation gets its own deadline (atfg_assignments.escalate_at), and the approval's wait the
-- one it has if the escalation comes on time (escalate_at plus the escalation's seconds): no
-- expiry of the engine's (the sweep of any process on this database, or a late decision) can
-- then expire an approval that was to escalate first. Pending escalations move over.
ALTER TABLE atfg_assignments ADD COLUMN escalate_at double precision;

UPDATE atfg_assignments a
SET escalate_at = w.expires_at
FROM waits w
WHERE w.id = a.wait_id AND a.escalate IS NOT NULL;

UPDATE waits w
SET expires_at = w.expires_at + (a.escalate::json ->> 'expires_in_seconds')::double precision
FROM atfg_assignments a
WHERE a.wait_id = w.id AND a.escalate IS NOT NULL AND w.status = 'pending' AND w.expires_at IS NOT NULL;

-- The sweeper's escalations that fell due.
DROP INDEX atfg_assignments_escalating;
CREATE INDEX atfg_assignments_escalating ON atfg_assignments (escalate_at) WHERE escalate IS NOT NULL;
