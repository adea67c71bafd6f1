-- A checkpoint's revision history no longer holds its latest revision: that one is the
-- checkpoints row itself, and 0011's triggers copied every revision written, so each checkpoint
-- was stored twice (a run parked on a 200-byte checkpoint: about 380 bytes a run more on
-- PostgreSQL, 0013 there) and every save wrote a second row. Now a revision is copied into the
-- history when a later one replaces it (OLD, on an update of the revision); the history read
-- (atfgraph/server/_console_reads.py, SQL_CHECKPOINT_REVISIONS) takes the checkpoints row with
-- it, and the last 20 revisions of each checkpoint are kept as before (19 here and the row).
DROP TRIGGER atfg_checkpoint_created;
DROP TRIGGER atfg_checkpoint_revised;
CREATE TRIGGER atfg_checkpoint_revised AFTER UPDATE OF revision ON checkpoints
WHEN NEW.revision <> OLD.revision
BEGIN
    INSERT OR REPLACE INTO atfg_checkpoint_revisions (run_id, scope, name, revision, value, saved_at)
    VALUES (OLD.run_id, OLD.scope, OLD.name, OLD.revision, OLD.value, OLD.updated_at);
    DELETE FROM atfg_checkpoint_revisions
    WHERE run_id = NEW.run_id AND scope = NEW.scope AND name = NEW.name AND revision <= NEW.revision - 20;
END;
-- The copies of the latest revisions written before this migration.
DELETE FROM atfg_checkpoint_revisions
WHERE EXISTS (SELECT 1 FROM checkpoints c
              WHERE c.run_id = atfg_checkpoint_revisions.run_id AND c.scope = atfg_checkpoint_revisions.scope
                AND c.name = atfg_checkpoint_revisions.name AND c.revision <= atfg_checkpoint_revisions.revision);
