-- An escalation gets its own deadline (atfg_assignments.escalate_at), and the approval's wait the
-- one it has if the escalation comes on time (escalate_at plus the escalation's seconds): no
-- expiry of the engine's (the sweep of any process on this database, or a late decision) can
-- then expire an approval that was to escalate first. Pending escalations move over.
ALTER TABLE atfg_assignments ADD COLUMN escalate_at REAL;

UPDATE atfg_assignments
SET escalate_at = (SELECT w.expires_at FROM waits w WHERE w.id = atfg_assignments.wait_id)
WHERE escalate IS NOT NULL;

UPDATE waits
SET expires_at = expires_at + (
    SELECT json_extract(a.escalate, '$.expires_in_seconds') FROM atfg_assignments a WHERE a.wait_id = waits.id
)
WHERE status = 'pending' AND expires_at IS NOT NULL
  AND id IN (SELECT wait_id FROM atfg_assignments WHERE escalate IS NOT NULL);

-- The sweeper's escalations that fell due.
DROP INDEX atfg_assignments_escalating;
CREATE INDEX atfg_assignments_escalating ON atfg_assignments (escalate_at) WHERE escalate IS NOT NULL;
