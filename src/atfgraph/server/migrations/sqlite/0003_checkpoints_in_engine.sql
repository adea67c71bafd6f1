-- One model: a traverser's checkpoints are rows of the engine's checkpoints table, with the same
-- compare-and-set revisions as a pyworkflow step's. They live at scope '' (the traverser's
-- handler, not one of its steps). Values, revisions and times move unchanged.
INSERT INTO checkpoints (run_id, scope, name, value, revision, updated_at)
SELECT traverser_id, '', name, value, revision, updated_at FROM atfg_checkpoints;

DROP TABLE atfg_checkpoints;
