-- Reads of every run and of the one inbox (GET /api/v2/runs, GET /api/v2/inbox, the console's
-- Runs and Inbox pages).
--
-- Every run newest first, of either kind (pyworkflow's own runs and traversers): an index walk
-- bounded by its LIMIT instead of a sort of the whole table (PostgreSQL has had it since
-- pyworkflow's first migration).
CREATE INDEX IF NOT EXISTS runs_by_created ON runs (created_at);
-- The inbox: the waits a person answers (approvals, hooks, step hooks) that are pending, oldest
-- first. Timers and retry back-offs are pending waits too, ended by their deadlines, never by a
-- person: a partial index without them keeps the walk from stepping over every sleeping run.
-- Written as NOT IN (timer, retry) so that no other index can serve the condition (an IN list
-- of the three kinds is a search of waits_by_kind, which then sorts every pending wait).
CREATE INDEX waits_inbox ON waits (created_at)
    WHERE status = 'pending' AND kind NOT IN ('timer', 'retry');
