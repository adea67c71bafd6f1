-- A decision made in a process whose runtime has room takes the run it wakes, in its own
-- statement (PostgresStore.resolve_wait_and_claim), as SQLite's did in its transaction and as a
-- new run's creation leases the run for its starting process. Until now on PostgreSQL the
-- decision committed with a NOTIFY, and the runtime then claimed the run with a statement and a
-- commit of its own; every other listening runtime woke and polled for nothing. Now the decision,
-- the claim and the run's state are one statement and one commit, and the NOTIFY is sent only
-- when some runtime has work to take: the decision woke a run it did not claim (another turn
-- holds it), or expired a wait past its deadline.

-- The decision of pyworkflow_resolve_wait (0008), without its NOTIFY: the caller sends it, or
-- does not because it claimed the run itself. Same outcomes: 'ok', 'expired', 'resolved:<status>',
-- 'approval', 'missing'.
CREATE FUNCTION pyworkflow_decide(p_wait text, p_run text, p_payload bytea, p_now double precision)
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
        RETURN 'expired';
    END IF;
    UPDATE waits SET status = 'received', payload = p_payload, resolved_at = p_now WHERE id = p_wait;
    PERFORM pyworkflow_event(p_run, p_now, 'wait_received', v_key, NULL);
    PERFORM pyworkflow_wake(p_run, p_wait, p_now);
    RETURN 'ok';
END $$;

-- A decision that leaves its run to whichever runtime claims it first (PostgresStore.resolve_wait).
CREATE OR REPLACE FUNCTION pyworkflow_resolve_wait(p_wait text, p_run text, p_payload bytea, p_now double precision)
RETURNS text
LANGUAGE plpgsql AS $$
DECLARE
    v_outcome text;
BEGIN
    v_outcome := pyworkflow_decide(p_wait, p_run, p_payload, p_now);
    IF v_outcome IN ('ok', 'expired') THEN
        PERFORM pg_notify('pyworkflow_queue', '');
    END IF;
    RETURN v_outcome;
END $$;

-- A decision that claims the run it woke for p_owner (pyworkflow_claim_with_states 'run', 0015).
-- The first column is the decision's outcome; when it is 'ok' and the run was free, the claim's
-- rows follow it in the other columns (the claim, then the state rows); otherwise one row carries
-- the outcome alone and the NOTIFY goes out as pyworkflow_resolve_wait's would.
CREATE FUNCTION pyworkflow_resolve_wait_and_claim(p_wait text, p_run text, p_payload bytea,
                                                  p_now double precision, p_owner text,
                                                  p_ttl double precision, p_max_crashes integer)
RETURNS TABLE (d_outcome text, c_run text, c_epoch integer, c_wake_seq integer, c_workflow text,
               c_input bytea, c_resumed boolean, c_next_due double precision, s_kind integer,
               step_key text, step_status text, attempt integer, result bytea, error bytea,
               delivered integer,
               w_id text, w_run text, wait_key text, w_kind text, w_name text, w_step_key text,
               w_status text, notified boolean, created_at double precision,
               expires_at double precision, resolved_at double precision, payload bytea,
               payload_schema bytea,
               scope text, name text, value bytea, revision integer)
LANGUAGE plpgsql AS $$
DECLARE
    v_outcome text;
BEGIN
    v_outcome := pyworkflow_decide(p_wait, p_run, p_payload, p_now);
    IF v_outcome = 'ok' THEN
        RETURN QUERY SELECT v_outcome, s.*
            FROM pyworkflow_claim_with_states('run', p_run, p_owner, 1, p_now, p_ttl, p_max_crashes) s;
        IF FOUND THEN
            RETURN;  -- claimed here: no other runtime has anything to take
        END IF;
    END IF;
    IF v_outcome IN ('ok', 'expired') THEN
        PERFORM pg_notify('pyworkflow_queue', '');
    END IF;
    d_outcome := v_outcome;
    RETURN NEXT;
END $$;
