-- A turn that suspends on the wait it creates records the suspension with the wait, as SQLite's
-- store does (create_wait(suspend=True)): the run's suspended status and its event commit in the
-- wait's statement, and what is left of the suspension (the hooks' notified marks, the steps'
-- delivered counts, the end of the turn's lease) is a statement nobody waits for, written with
-- the next group. One run at a time that was five transactions to start and suspend, now four.

-- The wait, and with it the suspension ('ok' or 'exists': the turn suspends on that wait).
CREATE FUNCTION pyworkflow_create_wait_suspending(p_run text, p_epoch integer, p_id text, p_key text,
                                                  p_kind text, p_name text, p_step_key text, p_token bytea,
                                                  p_expires double precision, p_schema bytea,
                                                  p_now double precision)
RETURNS text
LANGUAGE plpgsql AS $$
DECLARE
    v_outcome text;
BEGIN
    v_outcome := pyworkflow_create_wait(p_run, p_epoch, p_id, p_key, p_kind, p_name, p_step_key, p_token,
                                        p_expires, p_schema, p_now);
    IF v_outcome IN ('ok', 'exists') THEN
        UPDATE runs SET status = 'suspended', updated_at = p_now WHERE id = p_run;
        PERFORM pyworkflow_event(p_run, p_now, 'run_suspended', NULL, NULL);
    END IF;
    RETURN v_outcome;
END $$;

-- The end of a suspended turn: the hooks it notified, the steps' delivered counts, and its queue
-- row (deleted, or, when a wake-up came during the turn, left due for any claim, with a NOTIFY).
CREATE FUNCTION pyworkflow_end_suspended_turn(p_run text, p_epoch integer, p_wake_seq integer,
                                              p_notified text[], p_steps text[], p_delivered integer[],
                                              p_now double precision)
RETURNS text
LANGUAGE plpgsql AS $$
DECLARE
    v_fence text;
BEGIN
    v_fence := pyworkflow_fence(p_run, p_epoch);
    IF v_fence <> 'ok' THEN
        RETURN v_fence;
    END IF;
    UPDATE waits SET notified = true WHERE id = ANY(p_notified);
    INSERT INTO steps (run_id, step_key, status, delivered, updated_at)
    SELECT p_run, k, 'running', d, p_now FROM unnest(p_steps, p_delivered) AS u(k, d)
    ON CONFLICT (run_id, step_key) DO UPDATE
    SET delivered = GREATEST(steps.delivered, EXCLUDED.delivered), updated_at = EXCLUDED.updated_at;
    DELETE FROM queue WHERE run_id = p_run AND wake_seq = p_wake_seq;
    IF NOT FOUND THEN
        UPDATE queue SET lease_owner = NULL, lease_expires_at = NULL, available_at = p_now WHERE run_id = p_run;
        PERFORM pg_notify('pyworkflow_queue', '');
    END IF;
    RETURN 'ok';
END $$;

-- A whole suspension in one statement (a turn whose wait existed before it, or whose
-- on_created failed): its status and event, then the end of the turn, written once above.
CREATE OR REPLACE FUNCTION pyworkflow_suspend_run(p_run text, p_epoch integer, p_wake_seq integer,
                                                  p_notified text[], p_steps text[], p_delivered integer[],
                                                  p_now double precision)
RETURNS text
LANGUAGE plpgsql AS $$
DECLARE
    v_outcome text;
BEGIN
    v_outcome := pyworkflow_end_suspended_turn(p_run, p_epoch, p_wake_seq, p_notified, p_steps, p_delivered,
                                               p_now);
    IF v_outcome = 'ok' THEN
        UPDATE runs SET status = 'suspended', updated_at = p_now WHERE id = p_run;
        PERFORM pyworkflow_event(p_run, p_now, 'run_suspended', NULL, NULL);
    END IF;
    RETURN v_outcome;
END $$;
