-- The hot turn writes as server-side functions: one statement, so one round trip and no
-- BEGIN/COMMIT from the client, instead of five to seven statements. Same semantics as the
-- statement-by-statement versions in _postgres.py: each locks the run's row first, checks the
-- turn's fence, and returns 'ok' or why it refused ('lease_lost', 'cancelled', 'has_result',
-- 'conflict:<current revision>'); the client raises the matching error. A function runs in the
-- caller's transaction, and in READ COMMITTED each statement after the lock sees fresh data.

-- The run's lock and the turn's fence.
CREATE FUNCTION pyworkflow_fence(p_run text, p_epoch integer) RETURNS text
LANGUAGE plpgsql AS $$
DECLARE
    v_status text;
    v_epoch integer;
BEGIN
    SELECT r.status, q.epoch INTO v_status, v_epoch
    FROM runs r LEFT JOIN queue q ON q.run_id = r.id WHERE r.id = p_run FOR UPDATE OF r;
    IF FOUND AND v_epoch = p_epoch THEN
        RETURN 'ok';
    END IF;
    IF v_status = 'cancelled' THEN
        RETURN 'cancelled';
    END IF;
    RETURN 'lease_lost';
END $$;

-- Append to a run's history (the caller holds the run's lock).
CREATE FUNCTION pyworkflow_event(p_run text, p_at double precision, p_type text, p_key text, p_data bytea)
RETURNS void LANGUAGE plpgsql AS $$
BEGIN
    INSERT INTO events (run_id, seq, at, type, key, data)
    VALUES (p_run, (SELECT COALESCE(MAX(seq), 0) + 1 FROM events WHERE run_id = p_run), p_at, p_type, p_key,
            p_data);
END $$;

-- Record a step's result, once.
CREATE FUNCTION pyworkflow_complete_step(p_run text, p_epoch integer, p_key text, p_result bytea,
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
    PERFORM pyworkflow_event(p_run, p_now, 'step_completed', p_key, NULL);
    RETURN 'ok';
END $$;

-- Compare-and-set a checkpoint (p_expected NULL: unconditional); 'ok:<new revision>'.
CREATE FUNCTION pyworkflow_save_checkpoint(p_run text, p_epoch integer, p_scope text, p_name text,
                                           p_value bytea, p_expected integer, p_now double precision)
RETURNS text
LANGUAGE plpgsql AS $$
DECLARE
    v_fence text;
    v_current integer;
BEGIN
    v_fence := pyworkflow_fence(p_run, p_epoch);
    IF v_fence <> 'ok' THEN
        RETURN v_fence;
    END IF;
    SELECT revision INTO v_current FROM checkpoints WHERE run_id = p_run AND scope = p_scope AND name = p_name;
    v_current := COALESCE(v_current, 0);
    IF p_expected IS NOT NULL AND p_expected <> v_current THEN
        RETURN 'conflict:' || v_current;
    END IF;
    INSERT INTO checkpoints (run_id, scope, name, value, revision, updated_at)
    VALUES (p_run, p_scope, p_name, p_value, v_current + 1, p_now)
    ON CONFLICT (run_id, scope, name) DO UPDATE
    SET value = EXCLUDED.value, revision = EXCLUDED.revision, updated_at = EXCLUDED.updated_at;
    PERFORM pyworkflow_event(p_run, p_now, 'checkpoint_saved',
                             CASE WHEN p_name = '' THEN p_scope ELSE p_scope || '/' || p_name END, NULL);
    RETURN 'ok:' || (v_current + 1);
END $$;

-- End a turn that waits: mark waits notified, keep generator progress, suspend the run, and drop
-- its queue row unless a wake-up arrived during the turn (then keep it, unleased, due now).
CREATE FUNCTION pyworkflow_suspend_run(p_run text, p_epoch integer, p_wake_seq integer, p_notified text[],
                                       p_steps text[], p_delivered integer[], p_now double precision)
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
    UPDATE runs SET status = 'suspended', updated_at = p_now WHERE id = p_run;
    PERFORM pyworkflow_event(p_run, p_now, 'run_suspended', NULL, NULL);
    DELETE FROM queue WHERE run_id = p_run AND wake_seq = p_wake_seq;
    IF NOT FOUND THEN
        UPDATE queue SET lease_owner = NULL, lease_expires_at = NULL, available_at = p_now WHERE run_id = p_run;
        PERFORM pg_notify('pyworkflow_queue', '');
    END IF;
    RETURN 'ok';
END $$;

-- End a run: completed (p_error NULL) or failed; its pending waits are cancelled.
CREATE FUNCTION pyworkflow_finish_run(p_run text, p_epoch integer, p_result bytea, p_error bytea,
                                      p_now double precision) RETURNS text
LANGUAGE plpgsql AS $$
DECLARE
    v_fence text;
BEGIN
    v_fence := pyworkflow_fence(p_run, p_epoch);
    IF v_fence <> 'ok' THEN
        RETURN v_fence;
    END IF;
    UPDATE runs SET status = CASE WHEN p_error IS NULL THEN 'completed' ELSE 'failed' END,
        result = p_result, error = p_error, updated_at = p_now, finished_at = p_now
    WHERE id = p_run;
    UPDATE waits SET status = 'cancelled', resolved_at = p_now WHERE run_id = p_run AND status = 'pending';
    PERFORM pyworkflow_event(p_run, p_now, CASE WHEN p_error IS NULL THEN 'run_completed' ELSE 'run_failed' END,
                             NULL, p_error);
    DELETE FROM queue WHERE run_id = p_run;
    RETURN 'ok';
END $$;

-- Create a pending wait; 'exists' when the run already has one with this key (left unchanged).
CREATE FUNCTION pyworkflow_create_wait(p_run text, p_epoch integer, p_id text, p_key text, p_kind text,
                                       p_name text, p_step_key text, p_token bytea,
                                       p_expires double precision, p_schema bytea, p_now double precision)
RETURNS text
LANGUAGE plpgsql AS $$
DECLARE
    v_fence text;
BEGIN
    v_fence := pyworkflow_fence(p_run, p_epoch);
    IF v_fence <> 'ok' THEN
        RETURN v_fence;
    END IF;
    IF EXISTS (SELECT 1 FROM waits WHERE run_id = p_run AND wait_key = p_key) THEN
        RETURN 'exists';
    END IF;
    INSERT INTO waits (id, run_id, wait_key, kind, name, step_key, token_digest, status, created_at,
                       expires_at, payload_schema)
    VALUES (p_id, p_run, p_key, p_kind, p_name, p_step_key, p_token, 'pending', p_now, p_expires, p_schema);
    PERFORM pyworkflow_event(p_run, p_now, 'wait_created', p_key, NULL);
    RETURN 'ok';
END $$;
