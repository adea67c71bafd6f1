-- A step's checkpoints serve only its own re-execution (after a hook, a retry or a crash), so
-- they go when nothing can re-execute the step any more: in the transaction that records the
-- step's result, and when the run ends. Checkpoints at scope '' are a run's own (an atfgraph
-- traverser's, read after it ended with GET /traversers/{id}/checkpoints/{name}): they stay as
-- long as the run does. The SQLite store's copy of these rules is in _sqlite.py
-- (complete_step, fail_step, _end_run); the final failure of a step is PostgresStore.fail_step.

-- Record a step's result, once (see 0002), and delete the step's checkpoints with it.
CREATE OR REPLACE FUNCTION pyworkflow_complete_step(p_run text, p_epoch integer, p_key text, p_result bytea,
                                                    p_now double precision) RETURNS text
LANGUAGE plpgsql AS $$
DECLARE
    v_fence text;
BEGIN
    v_fence := pyworkflow_fence(p_run, p_epoch);
    IF v_fence <> 'ok' THEN
        RETURN v_fence;
    END IF;
    IF EXISTS (SELECT 1 FROM steps WHERE run_id = p_run AND step_key = p_key
               AND status IN ('completed', 'failed')) THEN
        RETURN 'has_result';
    END IF;
    INSERT INTO steps (run_id, step_key, status, attempt, result, error, delivered, updated_at)
    VALUES (p_run, p_key, 'completed', 0, p_result, NULL, 0, p_now)
    ON CONFLICT (run_id, step_key) DO UPDATE SET
        status = 'completed', attempt = 0, result = EXCLUDED.result, error = NULL, updated_at = EXCLUDED.updated_at;
    DELETE FROM checkpoints WHERE run_id = p_run AND scope = p_key;
    PERFORM pyworkflow_event(p_run, p_now, 'step_completed', p_key, NULL);
    RETURN 'ok';
END $$;

-- End a run (see 0008), deleting its steps' checkpoints (every scope but the run's own, '').
CREATE OR REPLACE FUNCTION pyworkflow_end_run(p_run text, p_status text, p_result bytea, p_error bytea,
                                              p_event text, p_now double precision) RETURNS void
LANGUAGE plpgsql AS $$
BEGIN
    UPDATE runs SET status = p_status, result = p_result, error = p_error, updated_at = p_now,
        finished_at = p_now
    WHERE id = p_run;
    UPDATE waits SET status = 'cancelled', resolved_at = p_now WHERE run_id = p_run AND status = 'pending';
    DELETE FROM queue WHERE run_id = p_run;
    DELETE FROM checkpoints WHERE run_id = p_run AND scope <> '';
    PERFORM pyworkflow_event(p_run, p_now, p_event, NULL, p_error);
END $$;
