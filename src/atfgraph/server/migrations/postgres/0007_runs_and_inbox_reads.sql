-- Reads of the one inbox (GET /api/v2/inbox, the console's Inbox page): the waits a person
-- answers (approvals, hooks, step hooks) that are pending, oldest first. Timers and retry
-- back-offs are pending waits too, ended by their deadlines, never by a person: a partial index
-- without them keeps the walk from stepping over every sleeping run. Written as NOT IN (timer,
-- retry), as the SQLite file says why. Every run newest first (GET /api/v2/runs) is served by
-- runs_by_created, pyworkflow's first migration.
CREATE INDEX waits_inbox ON waits (created_at)
    WHERE status = 'pending' AND kind NOT IN ('timer', 'retry');
