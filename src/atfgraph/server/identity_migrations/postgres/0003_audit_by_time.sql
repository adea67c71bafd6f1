-- The audit trail's own retention (atfg db purge --audit-older-than, the server's
-- --audit-retention): entries by time, the oldest first, so that a purge walks only what it
-- deletes.
CREATE INDEX atfg_audit_by_at ON atfg_audit (at);
