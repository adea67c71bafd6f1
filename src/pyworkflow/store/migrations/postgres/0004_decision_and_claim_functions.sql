-- A decision (resolve_wait) and a Celery turn's claim (claim_run) as server-side functions: one
-- statement each, so the client can send them in a group commit with other runs' transitions
-- (see _postgres.py). Same semantics as the statement-by-statement versions they replace: each
-- locks the run's row first, then touches only that run's rows.

-- Wake a run (the caller holds its lock): due now, or, if a turn holds it, bump wake_seq so the
-- turn's end keeps the row.
CREATE FUNCTION pyworkflow_wake(p_run text, p_now double precision) RETURNS void
LANGUAGE plpgsql AS $$
BEGIN
    INSERT INTO queue (run_id, available_at, wake_seq) VALUES (p_run, p_now, 1)
    ON CONFLICT (run_id) DO UPDATE
    SET wake_seq = queue.wake_seq + 1, available_at = LEAST(queue.available_at, EXCLUDED.available_at);
END $$;

-- The single transition of a wait out of 'pending' by a decision. The caller found the wait (by
-- token or id) without a lock; here the run is locked and the wait read again, so a racing
-- decision or expiry that committed first wins. Returns 'ok' (received), 'expired' (past its
-- deadline: expired now instead, and the run woken to see it), 'resolved:<status>' (it already
-- left 'pending') or 'missing'.
CREATE FUNCTION pyworkflow_resolve_wait(p_wait text, p_run text, p_payload bytea, p_now double precision)
RETURNS text
LANGUAGE plpgsql AS $$
DECLARE
    v_status text;
    v_key text;
    v_expires double precision;
BEGIN
    PERFORM 1 FROM runs WHERE id = p_run FOR UPDATE;
    SELECT status, wait_key, expires_at INTO v_status, v_key, v_expires
    FROM waits WHERE id = p_wait AND run_id = p_run;
    IF NOT FOUND THEN
        RETURN 'missing';
    END IF;
    IF v_status <> 'pending' THEN
        RETURN 'resolved:' || v_status;
    END IF;
    IF v_expires IS NOT NULL AND v_expires <= p_now THEN
        UPDATE waits SET status = 'expired', payload = NULL, resolved_at = p_now WHERE id = p_wait;
        PERFORM pyworkflow_event(p_run, p_now, 'wait_expired', v_key, NULL);
        PERFORM pyworkflow_wake(p_run, p_now);
        PERFORM pg_notify('pyworkflow_queue', '');
        RETURN 'expired';
    END IF;
    UPDATE waits SET status = 'received', payload = p_payload, resolved_at = p_now WHERE id = p_wait;
    PERFORM pyworkflow_event(p_run, p_now, 'wait_received', v_key, NULL);
    PERFORM pyworkflow_wake(p_run, p_now);
    PERFORM pg_notify('pyworkflow_queue', '');
    RETURN 'ok';
END $$;

-- Lease one run if it is due and nobody holds it (a Celery turn message); no row when it is not
-- (a duplicate message, a run another worker holds, a finished run). A queue row whose previous
-- lease was never released counts as a crash; past p_max_crashes the run is failed instead.
CREATE FUNCTION pyworkflow_claim_run(p_run text, p_owner text, p_now double precision, p_ttl double precision,
                                     p_max_crashes integer)
RETURNS TABLE (c_run text, c_epoch integer, c_wake_seq integer, c_workflow text, c_input bytea,
               c_resumed boolean)
LANGUAGE plpgsql AS $$
DECLARE
    c record;
    v_crashes integer;
    v_error bytea;
BEGIN
    PERFORM 1 FROM runs WHERE id = p_run FOR UPDATE;
    SELECT q.epoch AS ep, q.wake_seq AS ws, q.lease_owner AS prev, q.crashes AS cr,
           r.workflow AS wf, r.input AS inp, r.status AS st
    INTO c
    FROM queue q JOIN runs r ON r.id = q.run_id
    WHERE q.run_id = p_run AND q.available_at <= p_now
      AND (q.lease_expires_at IS NULL OR q.lease_expires_at < p_now)
    FOR UPDATE OF q;
    IF NOT FOUND THEN
        RETURN;
    END IF;
    IF c.st IN ('completed', 'failed', 'cancelled') THEN
        DELETE FROM queue WHERE run_id = p_run;
        RETURN;
    END IF;
    v_crashes := c.cr;
    IF c.prev IS NOT NULL THEN  -- a turn that never ended: its worker died
        v_crashes := v_crashes + 1;
        IF v_crashes > p_max_crashes THEN
            v_error := convert_to(
                '{"type":"pyworkflow.WorkerCrashed","message":"the worker running this run died '
                || v_crashes || ' times; giving up (max_crashes)"}', 'UTF8');
            UPDATE runs SET status = 'failed', result = NULL, error = v_error, updated_at = p_now,
                finished_at = p_now
            WHERE id = p_run;
            UPDATE waits SET status = 'cancelled', resolved_at = p_now WHERE run_id = p_run AND status = 'pending';
            DELETE FROM queue WHERE run_id = p_run;
            PERFORM pyworkflow_event(p_run, p_now, 'run_failed', NULL, v_error);
            RETURN;
        END IF;
    END IF;
    UPDATE queue SET epoch = epoch + 1, lease_owner = p_owner, lease_expires_at = p_now + p_ttl,
        crashes = v_crashes
    WHERE run_id = p_run;
    UPDATE runs SET status = 'running', updated_at = p_now WHERE id = p_run;
    PERFORM pyworkflow_event(p_run, p_now, CASE WHEN c.prev IS NULL THEN 'run_resumed' ELSE 'run_recovered' END,
                             NULL, NULL);
    c_run := p_run;
    c_epoch := c.ep + 1;
    c_wake_seq := c.ws;
    c_workflow := c.wf;
    c_input := c.inp;
    c_resumed := c.st <> 'pending';
    RETURN NEXT;
END $$;
