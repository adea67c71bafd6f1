-- Retention (pyworkflow.store._retention, docs/operators.md "Retention"): when a wait is deleted
-- (its run purged), the rows this component keeps about it go in the same transaction, whoever
-- deletes it (the graph server's sweeper, atfg db purge, or pyworkflow's own runtimes on a
-- shared database), so that no decision link, delivery, assignment or notification outlives it.
CREATE TRIGGER atfg_wait_deleted AFTER DELETE ON waits
BEGIN
    DELETE FROM atfg_wait_links WHERE wait_id = OLD.id;
    DELETE FROM atfg_deliveries WHERE wait_id = OLD.id;
    DELETE FROM atfg_assignments WHERE wait_id = OLD.id;
    DELETE FROM atfg_wait_events WHERE wait_id = OLD.id;
END;
-- The trigger's lookups: a wait's deliveries, and its outbox rows (a short table the notifier
-- empties, but one that grows while the server is down).
CREATE INDEX atfg_deliveries_by_wait ON atfg_deliveries (wait_id);
CREATE INDEX atfg_wait_events_by_wait ON atfg_wait_events (wait_id);
