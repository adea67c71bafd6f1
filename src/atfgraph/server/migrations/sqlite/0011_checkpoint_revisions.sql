-- Checkpoint revision history (docs/reviewers.md, "Run detail"): the engine's checkpoints table
-- keeps only a checkpoint's latest revision; these triggers copy every revision written, in the
-- transaction that writes it (whichever store writes it: the graph store's save_checkpoint, or
-- pyworkflow's store for a run on this database), and keep the last 20 revisions of each
-- checkpoint (run, scope, name). A checkpoint's history is deleted with it (a pyworkflow step's
-- checkpoints go with its result and when its run ends, a traverser's stay).
CREATE TABLE atfg_checkpoint_revisions (
    run_id   TEXT    NOT NULL,
    scope    TEXT    NOT NULL,
    name     TEXT    NOT NULL,
    revision INTEGER NOT NULL,
    value    BLOB    NOT NULL,
    saved_at REAL    NOT NULL,
    PRIMARY KEY (run_id, scope, name, revision)
) WITHOUT ROWID;
CREATE TRIGGER atfg_checkpoint_created AFTER INSERT ON checkpoints
BEGIN
    INSERT OR REPLACE INTO atfg_checkpoint_revisions (run_id, scope, name, revision, value, saved_at)
    VALUES (NEW.run_id, NEW.scope, NEW.name, NEW.revision, NEW.value, NEW.updated_at);
    DELETE FROM atfg_checkpoint_revisions
    WHERE run_id = NEW.run_id AND scope = NEW.scope AND name = NEW.name AND revision <= NEW.revision - 20;
END;
CREATE TRIGGER atfg_checkpoint_revised AFTER UPDATE OF revision ON checkpoints
WHEN NEW.revision <> OLD.revision
BEGIN
    INSERT OR REPLACE INTO atfg_checkpoint_revisions (run_id, scope, name, revision, value, saved_at)
    VALUES (NEW.run_id, NEW.scope, NEW.name, NEW.revision, NEW.value, NEW.updated_at);
    DELETE FROM atfg_checkpoint_revisions
    WHERE run_id = NEW.run_id AND scope = NEW.scope AND name = NEW.name AND revision <= NEW.revision - 20;
END;
CREATE TRIGGER atfg_checkpoint_deleted AFTER DELETE ON checkpoints
BEGIN
    DELETE FROM atfg_checkpoint_revisions
    WHERE run_id = OLD.run_id AND scope = OLD.scope AND name = OLD.name;
END;
-- The checkpoints written before this migration start their history at their latest revision.
INSERT INTO atfg_checkpoint_revisions (run_id, scope, name, revision, value, saved_at)
SELECT run_id, scope, name, revision, value, updated_at FROM checkpoints;
