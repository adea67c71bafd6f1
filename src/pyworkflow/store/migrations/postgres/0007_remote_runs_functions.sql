-- pyworkflow's server-side functions for runs served by remote workers (migration 0006): the
-- runtimes' claims, readiness and next-due time see only pyworkflow's own queue rows (node_id
-- NULL; a remote run's row is its node's workers'), walking queue_ready (node_id, available_at);
-- waking a run after one of its waits resolved or expired follows the remote-run rule; and a
-- decision refuses an approval (decided through the graph server). Same semantics as before for
-- pyworkflow's runs. The SQLite store's copy of the wake rule is pyworkflow.store.wake_run.

-- Wake a run after its wait p_wait left 'pending' (p_wait NULL: no particular wait), taking the
-- run's lock (a no-op when the caller holds it, as every caller here does).
-- A pyworkflow run: due now, or, if a turn holds it, bump wake_seq so the turn's end keeps the
-- row. A remote run: continued only when it is parked on that wait (suspended, waiting_on =
-- p_wait): pending, waiting_on NULL, one more max_attempts (a pause is not an attempt), and its
-- queue row for its node due now with epoch = attempt (every remote claim increments both, so the
-- fence keeps increasing across pauses). Returns the node_id of the remote run it continued, else
-- NULL.
DROP FUNCTION pyworkflow_wake(text, double precision);
CREATE FUNCTION pyworkflow_wake(p_run text, p_wait text, p_now double precision) RETURNS text
LANGUAGE plpgsql AS $$
DECLARE
    r record;
BEGIN
    SELECT node_id, status, waiting_on, attempt INTO r FROM runs WHERE id = p_run FOR UPDATE;
    IF NOT FOUND THEN
        RETURN NULL;
    END IF;
    IF r.node_id IS NULL THEN
        INSERT INTO queue (run_id, available_at, wake_seq) VALUES (p_run, p_now, 1)
        ON CONFLICT (run_id) DO UPDATE
        SET wake_seq = queue.wake_seq + 1, available_at = LEAST(queue.available_at, EXCLUDED.available_at);
        RETURN NULL;
    END IF;
    IF p_wait IS NULL OR r.status <> 'suspended' OR r.waiting_on IS DISTINCT FROM p_wait THEN
        RETURN NULL;
    END IF;
    UPDATE runs SET status = 'pending', waiting_on = NULL, max_attempts = max_attempts + 1, updated_at = p_now
    WHERE id = p_run;
    -- A parked run has no queue row; should one have been left behind, it is taken over: due now,
    -- unleased, fenced at least as high as before.
    INSERT INTO queue (run_id, available_at, wake_seq, epoch, node_id) VALUES (p_run, p_now, 1, r.attempt, r.node_id)
    ON CONFLICT (run_id) DO UPDATE
    SET available_at = EXCLUDED.available_at, wake_seq = queue.wake_seq + 1,
        epoch = GREATEST(queue.epoch, EXCLUDED.epoch), node_id = EXCLUDED.node_id, lease_owner = NULL,
        lease_expires_at = NULL;
    RETURN r.node_id;
END $$;

-- The earliest time at which a claim or a wait expiry could find work (pyworkflow's queue rows;
-- every pending wait, approvals included: the engine's sweeper expires them all).
CREATE OR REPLACE FUNCTION pyworkflow_next_due() RETURNS double precision
LANGUAGE sql VOLATILE AS $$
    SELECT LEAST(
        (SELECT MIN(COALESCE(lease_expires_at, available_at)) FROM queue WHERE node_id IS NULL),
        (SELECT MIN(expires_at) FROM waits WHERE status = 'pending' AND expires_at IS NOT NULL))
$$;

-- Expire up to p_limit pending waits whose deadline has passed (approvals too); wake their runs
-- by the rule above. Runs are locked in id order, so two sweepers never wait on each other in a
-- cycle. Returns how many expired.
CREATE OR REPLACE FUNCTION pyworkflow_expire_due_waits(p_now double precision, p_limit integer) RETURNS integer
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
            PERFORM pyworkflow_wake(w.run_id, w.id, p_now);
            v_count := v_count + 1;
        END IF;
    END LOOP;
    IF v_count > 0 THEN
        PERFORM pg_notify('pyworkflow_queue', '');
    END IF;
    RETURN v_count;
END $$;

-- Lease up to p_limit of pyworkflow's due runs nobody holds (see 0003; only node_id IS NULL).
CREATE OR REPLACE FUNCTION pyworkflow_claim(p_owner text, p_limit integer, p_now double precision,
                                            p_ttl double precision, p_max_crashes integer)
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
        WHERE q.node_id IS NULL AND q.available_at <= p_now
          AND (q.lease_expires_at IS NULL OR q.lease_expires_at < p_now)
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

-- A decision (see 0004): refuses an approval ('approval', nothing changed) and wakes by the rule
-- above. Returns 'ok', 'expired', 'resolved:<status>', 'missing' or 'approval'.
CREATE OR REPLACE FUNCTION pyworkflow_resolve_wait(p_wait text, p_run text, p_payload bytea, p_now double precision)
RETURNS text
LANGUAGE plpgsql AS $$
DECLARE
    v_status text;
    v_key text;
    v_kind text;
    v_expires double precision;
BEGIN
    PERFORM 1 FROM runs WHERE id = p_run FOR UPDATE;
    SELECT status, wait_key, kind, expires_at INTO v_status, v_key, v_kind, v_expires
    FROM waits WHERE id = p_wait AND run_id = p_run;
    IF NOT FOUND THEN
        RETURN 'missing';
    END IF;
    IF v_kind = 'approval' THEN
        RETURN 'approval';
    END IF;
    IF v_status <> 'pending' THEN
        RETURN 'resolved:' || v_status;
    END IF;
    IF v_expires IS NOT NULL AND v_expires <= p_now THEN
        UPDATE waits SET status = 'expired', payload = NULL, resolved_at = p_now WHERE id = p_wait;
        PERFORM pyworkflow_event(p_run, p_now, 'wait_expired', v_key, NULL);
        PERFORM pyworkflow_wake(p_run, p_wait, p_now);
        PERFORM pg_notify('pyworkflow_queue', '');
        RETURN 'expired';
    END IF;
    UPDATE waits SET status = 'received', payload = p_payload, resolved_at = p_now WHERE id = p_wait;
    PERFORM pyworkflow_event(p_run, p_now, 'wait_received', v_key, NULL);
    PERFORM pyworkflow_wake(p_run, p_wait, p_now);
    PERFORM pg_notify('pyworkflow_queue', '');
    RETURN 'ok';
END $$;

-- Lease one of pyworkflow's runs if it is due and nobody holds it (a Celery turn message; see
-- 0004); no row for a remote run's queue row.
CREATE OR REPLACE FUNCTION pyworkflow_claim_run(p_run text, p_owner text, p_now double precision,
                                                p_ttl double precision, p_max_crashes integer)
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
    WHERE q.run_id = p_run AND q.node_id IS NULL AND q.available_at <= p_now
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
