-- The local runtime's tick as one statement: expire due waits, claim due runs and return the next
-- time anything falls due, in one round trip instead of up to five. Same semantics as the
-- statement-by-statement versions in _postgres.py (expire_due_waits, claim, next_due).

-- The earliest time at which a claim or a wait expiry could find work.
CREATE FUNCTION pyworkflow_next_due() RETURNS double precision
LANGUAGE sql VOLATILE AS $$
    SELECT LEAST(
        (SELECT MIN(COALESCE(lease_expires_at, available_at)) FROM queue),
        (SELECT MIN(expires_at) FROM waits WHERE status = 'pending' AND expires_at IS NOT NULL))
$$;

-- Expire up to p_limit pending waits whose deadline has passed; wake their runs. Runs are locked
-- in id order, so two sweepers never wait on each other in a cycle. Returns how many expired.
CREATE FUNCTION pyworkflow_expire_due_waits(p_now double precision, p_limit integer) RETURNS integer
LANGUAGE plpgsql AS $$
DECLARE
    w record;
    v_count integer := 0;
BEGIN
    FOR w IN
        SELECT d.id, d.run_id, d.wait_key FROM (
            SELECT id, run_id, wait_key FROM waits
            WHERE status = 'pending' AND expires_at IS NOT NULL AND expires_at <= p_now
            ORDER BY expires_at LIMIT p_limit) d
        ORDER BY d.run_id, d.id
    LOOP
        PERFORM 1 FROM runs WHERE id = w.run_id FOR UPDATE;
        UPDATE waits SET status = 'expired', payload = NULL, resolved_at = p_now
        WHERE id = w.id AND status = 'pending';
        IF FOUND THEN
            PERFORM pyworkflow_event(w.run_id, p_now, 'wait_expired', w.wait_key, NULL);
            INSERT INTO queue (run_id, available_at, wake_seq) VALUES (w.run_id, p_now, 1)
            ON CONFLICT (run_id) DO UPDATE
            SET wake_seq = queue.wake_seq + 1, available_at = LEAST(queue.available_at, EXCLUDED.available_at);
            v_count := v_count + 1;
        END IF;
    END LOOP;
    IF v_count > 0 THEN
        PERFORM pg_notify('pyworkflow_queue', '');
    END IF;
    RETURN v_count;
END $$;

-- Lease up to p_limit due runs nobody holds (rows another claimer or a transition holds are
-- skipped). A row whose previous lease was never released counts as a crash; past p_max_crashes
-- the run is failed instead of claimed. Returns the claims.
CREATE FUNCTION pyworkflow_claim(p_owner text, p_limit integer, p_now double precision, p_ttl double precision,
                                 p_max_crashes integer)
RETURNS TABLE (c_run text, c_epoch integer, c_wake_seq integer, c_workflow text, c_input bytea,
               c_resumed boolean)
LANGUAGE plpgsql AS $$
DECLARE
    c record;
    v_crashes integer;
    v_error bytea;
BEGIN
    FOR c IN
        SELECT q.run_id AS rid, q.epoch AS ep, q.wake_seq AS ws, q.lease_owner AS prev, q.crashes AS cr,
               r.workflow AS wf, r.input AS inp, r.status AS st
        FROM queue q JOIN runs r ON r.id = q.run_id
        WHERE q.available_at <= p_now AND (q.lease_expires_at IS NULL OR q.lease_expires_at < p_now)
        ORDER BY q.available_at
        LIMIT p_limit
        FOR UPDATE OF q, r SKIP LOCKED
    LOOP
        IF c.st IN ('completed', 'failed', 'cancelled') THEN
            DELETE FROM queue WHERE run_id = c.rid;
            CONTINUE;
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
                WHERE id = c.rid;
                UPDATE waits SET status = 'cancelled', resolved_at = p_now
                WHERE run_id = c.rid AND status = 'pending';
                DELETE FROM queue WHERE run_id = c.rid;
                PERFORM pyworkflow_event(c.rid, p_now, 'run_failed', NULL, v_error);
                CONTINUE;
            END IF;
        END IF;
        UPDATE queue SET epoch = epoch + 1, lease_owner = p_owner, lease_expires_at = p_now + p_ttl,
            crashes = v_crashes
        WHERE run_id = c.rid;
        UPDATE runs SET status = 'running', updated_at = p_now WHERE id = c.rid;
        PERFORM pyworkflow_event(c.rid, p_now, CASE WHEN c.prev IS NULL THEN 'run_resumed' ELSE 'run_recovered' END,
                                 NULL, NULL);
        c_run := c.rid;
        c_epoch := c.ep + 1;
        c_wake_seq := c.ws;
        c_workflow := c.wf;
        c_input := c.inp;
        c_resumed := c.st <> 'pending';
        RETURN NEXT;
    END LOOP;
END $$;

-- One tick: when something is due, expire due waits and claim up to p_limit runs (p_limit 0: only
-- expire). Returns the claims, then one row with c_run NULL whose c_next_due is the next due time.
CREATE FUNCTION pyworkflow_poll(p_owner text, p_limit integer, p_now double precision, p_ttl double precision,
                                p_max_crashes integer)
RETURNS TABLE (c_run text, c_epoch integer, c_wake_seq integer, c_workflow text, c_input bytea,
               c_resumed boolean, c_next_due double precision)
LANGUAGE plpgsql AS $$
DECLARE
    v_due double precision;
BEGIN
    v_due := pyworkflow_next_due();
    IF v_due IS NOT NULL AND v_due <= p_now THEN
        PERFORM pyworkflow_expire_due_waits(p_now, 500);
        IF p_limit > 0 THEN
            RETURN QUERY
            SELECT cl.c_run, cl.c_epoch, cl.c_wake_seq, cl.c_workflow, cl.c_input, cl.c_resumed,
                   NULL::double precision
            FROM pyworkflow_claim(p_owner, p_limit, p_now, p_ttl, p_max_crashes) cl;
        END IF;
        v_due := pyworkflow_next_due();
    END IF;
    c_run := NULL;
    c_epoch := NULL;
    c_wake_seq := NULL;
    c_workflow := NULL;
    c_input := NULL;
    c_resumed := NULL;
    c_next_due := v_due;
    RETURN NEXT;
END $$;
