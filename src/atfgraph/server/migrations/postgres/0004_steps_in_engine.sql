-- One model: a traverser's child steps are step records of its run in the engine's steps table
-- (pyworkflow migration 0002 on SQLite, 0005 on PostgreSQL, added seq and target). The API's
-- 'succeeded' is the engine's 'completed'; created_at becomes updated_at (a child step is
-- written once).
INSERT INTO steps (run_id, step_key, status, attempt, result, error, delivered, updated_at, seq, target)
SELECT traverser_id, step_key, CASE status WHEN 'succeeded' THEN 'completed' ELSE status END, attempt,
       result, error, 0, created_at, seq, target
FROM atfg_steps;

DROP TABLE atfg_steps;
