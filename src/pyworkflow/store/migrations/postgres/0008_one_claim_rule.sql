-- Each durable rule written once on PostgreSQL. Until now the crash limit (and the lease of a
-- claimed row) was written out in pyworkflow_claim, in pyworkflow_claim_run and, in Python, in
-- PostgresStore.claim; ending a run (its status, waits cancelled, queue row deleted, event) in
-- pyworkflow_finish_run, in both claims' crash branch and in PostgresStore.cancel_run; expiring a
-- wait in pyworkflow_expire_due_waits and pyworkflow_resolve_wait. Here each is one function the
-- others call; the client's claim and cancel reach them through one statement. Semantics are
-- unchanged.

-- End a run: p_status ('completed', 'failed', 'cancelled') with its result or error, its pending
-- waits cancelled, its queue row deleted and p_event appended (with p_error as its data). The
-- caller holds the run's lock and has checked it may end the run.
CREATE OR REPLACE FUNCTION pyworkflow_end_run(p_run text, p_status text, p_result bytea, p_error bytea,
                                              p_event text, p_now double precision) RETURNS void
LANGUAGE plpgsql AS $$
BEGIN
    UPDATE runs SET status = p_status, result = p_result, error = p_error, updated_at = p_now,
        finished_at = p_now
    WHERE id = p_run;
    UPDATE waits SET status = 'cancelled', resolved_at = p_now WHERE run_id = p_run AND status = 'pending';
    DELETE FROM queue WHERE run_id = p_run;
    PERFORM pyworkflow_event(p_run, p_now, p_event, NULL, p_error);
END $$;

-- The crash limit and the lease, for one claimable queue row the caller has locked with its run
-- (the row's values are passed in). A finished run's leftover row is deleted (no claim). A row
-- whose previous lease was never released (p_prev NOT NULL) counts as a crash; past
-- p_max_crashes the run is failed with pyworkflow.WorkerCrashed instead of claimed. Otherwise
-- the row is leased to p_owner (epoch + 1) and the run is running. Returns the claim, or no row.
CREATE OR REPLACE FUNCTION pyworkflow_claim_row(p_run text, p_epoch integer, p_wake_seq integer, p_prev text,
                                                p_crashes integer, p_workflow text, p_input bytea,
                                                p_status text, p_owner text, p_now double precision,
                                                p_ttl double precision, p_max_crashes integer)
RETURNS TABLE (c_run text, c_epoch integer, c_wake_seq integer, c_workflow text, c_input bytea,
               c_resumed boolean)
LANGUAGE plpgsql AS $$
DECLARE
    v_crashes integer := p_crashes;
BEGIN
    IF p_status IN ('completed', 'failed', 'cancelled') THEN
        DELETE FROM queue WHERE run_id = p_run;
        RETURN;
    END IF;
    IF p_prev IS NOT NULL THEN  -- a turn that never ended: its worker died
        v_crashes := v_crashes + 1;
        IF v_crashes > p_max_crashes THEN
            PERFORM pyworkflow_end_run(p_run, 'failed', NULL, convert_to(
                '{"type":"pyworkflow.WorkerCrashed","message":"the worker running this run died '
                || v_crashes || ' times; giving up (max_crashes)"}', 'UTF8'), 'run_failed', p_now);
            RETURN;
        END IF;
    END IF;
    UPDATE queue SET epoch = epoch + 1, lease_owner = p_owner, lease_expires_at = p_now + p_ttl,
        crashes = v_crashes
    WHERE run_id = p_run;
    UPDATE runs SET status = 'running', updated_at = p_now WHERE id = p_run;
    PERFORM pyworkflow_event(p_run, p_now, CASE WHEN p_prev IS NULL THEN 'run_resumed' ELSE 'run_recovered' END,
                             NULL, NULL);
    c_run := p_run;
    c_epoch := p_epoch + 1;
    c_wake_seq := p_wake_seq;
    c_workflow := p_workflow;
    c_input := p_input;
    c_resumed := p_status <> 'pending';
    RETURN NEXT;
END $$;

-- Lease up to p_limit of pyworkflow's due runs nobody holds (rows another claimer or a
-- transition holds are skipped); each row by pyworkflow_claim_row. PostgresStore.claim and
-- pyworkflow_poll (the runtime's tick) call it.
CREATE OR REPLACE FUNCTION pyworkflow_claim(p_owner text, p_limit integer, p_now double precision,
                                            p_ttl double precision, p_max_crashes integer)
RETURNS TABLE (c_run text, c_epoch integer, c_wake_seq integer, c_workflow text, c_input bytea,
               c_resumed boolean)
LANGUAGE plpgsql AS $$
DECLARE
    c record;
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
        RETURN QUERY SELECT * FROM pyworkflow_claim_row(c.rid, c.ep, c.ws, c.prev, c.cr, c.wf, c.inp, c.st,
                                                        p_owner, p_now, p_ttl, p_max_crashes);
    END LOOP;
END $$;

-- Lease one of pyworkflow's runs if it is due and nobody holds it (a Celery turn message); no row
-- when it is not (a duplicate message, a run another worker holds, a finished run, a remote
-- run's queue row). The row by pyworkflow_claim_row.
CREATE OR REPLACE FUNCTION pyworkflow_claim_run(p_run text, p_owner text, p_now double precision,
                                                p_ttl double precision, p_max_crashes integer)
RETURNS TABLE (c_run text, c_epoch integer, c_wake_seq integer, c_workflow text, c_input bytea,
               c_resumed boolean)
LANGUAGE plpgsql AS $$
DECLARE
    c record;
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
    RETURN QUERY SELECT * FROM pyworkflow_claim_row(p_run, c.ep, c.ws, c.prev, c.cr, c.wf, c.inp, c.st,
                                                    p_owner, p_now, p_ttl, p_max_crashes);
END $$;

-- End a turn's run: completed (p_error NULL) or failed (see 0002), by pyworkflow_end_run.
CREATE OR REPLACE FUNCTION pyworkflow_finish_run(p_run text, p_epoch integer, p_result bytea, p_error bytea,
                                                 p_now double precision) RETURNS text
LANGUAGE plpgsql AS $$
DECLARE
    v_fence text;
BEGIN
    v_fence := pyworkflow_fence(p_run, p_epoch);
    IF v_fence <> 'ok' THEN
        RETURN v_fence;
    END IF;
    IF p_error IS NULL THEN
        PERFORM pyworkflow_end_run(p_run, 'completed', p_result, NULL, 'run_completed', p_now);
    ELSE
        PERFORM pyworkflow_end_run(p_run, 'failed', NULL, p_error, 'run_failed', p_now);
    END IF;
    RETURN 'ok';
END $$;

-- Cancel a run (PostgresStore.cancel_run): 'missing' (no such run), 'finished' (already
-- terminal: nothing changes) or 'ok' (cancelled by pyworkflow_end_run).
CREATE OR REPLACE FUNCTION pyworkflow_cancel_run(p_run text, p_now double precision) RETURNS text
LANGUAGE plpgsql AS $$
DECLARE
    v_status text;
BEGIN
    SELECT status INTO v_status FROM runs WHERE id = p_run FOR UPDATE;
    IF NOT FOUND THEN
        RETURN 'missing';
    END IF;
    IF v_status IN ('completed', 'failed', 'cancelled') THEN
        RETURN 'finished';
    END IF;
    PERFORM pyworkflow_end_run(p_run, 'cancelled', NULL, NULL, 'run_cancelled', p_now);
    RETURN 'ok';
END $$;

-- A pending wait's deadline passed: expire it and wake its run (the caller holds the run's lock
-- and sends the NOTIFY). Returns whether it was still pending (false: nothing changed).
CREATE OR REPLACE FUNCTION pyworkflow_expire_wait(p_wait text, p_run text, p_key text, p_now double precision)
RETURNS boolean
LANGUAGE plpgsql AS $$
BEGIN
    UPDATE waits SET status = 'expired', payload = NULL, resolved_at = p_now WHERE id = p_wait AND status = 'pending';
    IF NOT FOUND THEN
        RETURN false;
    END IF;
    PERFORM pyworkflow_event(p_run, p_now, 'wait_expired', p_key, NULL);
    PERFORM pyworkflow_wake(p_run, p_wait, p_now);
    RETURN true;
END $$;

-- Expire up to p_limit pending waits whose deadline has passed (see 0007), each by
-- pyworkflow_expire_wait. Runs are locked in id order.
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
        IF pyworkflow_expire_wait(w.id, w.run_id, w.wait_key, p_now) THEN
            v_count := v_count + 1;
        END IF;
    END LOOP;
    IF v_count > 0 THEN
        PERFORM pg_notify('pyworkflow_queue', '');
    END IF;
    RETURN v_count;
END $$;

-- A decision (see 0007); a wait past its deadline is expired by pyworkflow_expire_wait.
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
        PERFORM pyworkflow_expire_wait(p_wait, p_run, v_key, p_now);
        PERFORM pg_notify('pyworkflow_queue', '');
        RETURN 'expired';
    END IF;
    UPDATE waits SET status = 'received', payload = p_payload, resolved_at = p_now WHERE id = p_wait;
    PERFORM pyworkflow_event(p_run, p_now, 'wait_received', v_key, NULL);
    PERFORM pyworkflow_wake(p_run, p_wait, p_now);
    PERFORM pg_notify('pyworkflow_queue', '');
    RETURN 'ok';
END $$;
