-- A checkpoint's revision history no longer holds its latest revision: that one is the
-- checkpoints row itself, and 0013's trigger copied every revision written, so each checkpoint
-- was stored twice (a run parked on a 200-byte checkpoint: about 380 bytes a run more, measured
-- with bench.parked's breakdown) and every save wrote a second row. Now a revision is copied into
-- the history when a later one replaces it (OLD, on an update of the revision); the history read
-- (atfgraph/server/_console_reads.py, SQL_CHECKPOINT_REVISIONS) takes the checkpoints row with
-- it, and the last 20 revisions of each checkpoint are kept as before (19 here and the row).
-- SQLite's copy is its migration 0013.
DROP TRIGGER atfg_checkpoint_created ON checkpoints;
CREATE OR REPLACE FUNCTION atfg_checkpoint_written() RETURNS trigger LANGUAGE plpgsql AS $$
BEGIN
    IF TG_OP = 'DELETE' THEN
        DELETE FROM atfg_checkpoint_revisions
        WHERE run_id = OLD.run_id AND scope = OLD.scope AND name = OLD.name;
        RETURN NULL;
    END IF;
    INSERT INTO atfg_checkpoint_revisions (run_id, scope, name, revision, value, saved_at)
    VALUES (OLD.run_id, OLD.scope, OLD.name, OLD.revision, OLD.value, OLD.updated_at)
    ON CONFLICT (run_id, scope, name, revision) DO UPDATE
    SET value = EXCLUDED.value, saved_at = EXCLUDED.saved_at;
    DELETE FROM atfg_checkpoint_revisions
    WHERE run_id = NEW.run_id AND scope = NEW.scope AND name = NEW.name AND revision <= NEW.revision - 20;
    RETURN NULL;
END;
$$;
-- The copies of the latest revisions written before this migration.
DELETE FROM atfg_checkpoint_revisions h
USING checkpoints c
WHERE c.run_id = h.run_id AND c.scope = h.scope AND c.name = h.name AND c.revision <= h.revision;
