-- Listing approvals in one status, or all of them, oldest first (GET /approvals?status=...):
-- index walks bounded by their LIMIT instead of a sort of the whole table, and the LIMIT applies
-- after the status filter, not before it.
CREATE INDEX atfg_approvals_by_status ON atfg_approvals (status, created_at);
CREATE INDEX atfg_approvals_by_created ON atfg_approvals (created_at);
