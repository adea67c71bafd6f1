-- A decision by token in one statement (PostgresStore.resolve_wait, resolve_wait_and_claim):
-- until now `resume_hook` read the wait by its token in a statement of its own (a round trip)
-- to find the run to lock and the schema to check the payload against, then decided. A wait
-- without a payload schema has nothing to check in Python, so the lookup, the decision and the
-- claim of the woken run are now one statement; a wait with a schema answers 'terms' with its
-- row and nothing written, and the caller checks the payload and decides by id as before.
--
-- The statement does not know its run before it runs, so it cannot be sorted by run into a
-- group as the other transitions are (they lock runs in one order): it is sent last in its
-- group, and takes its run's lock only if no other transaction holds it (SKIP LOCKED), so it
-- never waits while holding a lock. A run locked elsewhere answers 'busy' with the wait's row,
-- nothing written, and the caller decides by id, waiting for the lock in the usual order.
--
-- Outcomes: those of pyworkflow_decide (0017: 'ok', 'expired', 'resolved:<status>',
-- 'approval', 'missing'), and 'terms', 'busy', and 'unknown' (no wait has that token). The
-- wait's columns (t_*) are as read before the decision, as the separate read had them. When
-- the decision is 'ok', p_owner is not NULL and the run was free, the claim's rows follow in
-- the other columns (pyworkflow_claim_with_states 'run', 0015); otherwise one row, and the
-- NOTIFY goes out as pyworkflow_resolve_wait's would.
CREATE FUNCTION pyworkflow_resolve_token(p_digest bytea, p_payload bytea, p_now double precision,
                                         p_owner text, p_ttl double precision, p_max_crashes integer)
RETURNS TABLE (d_outcome text,
               t_id text, t_run text, t_wait_key text, t_kind text, t_name text, t_step_key text,
               t_status text, t_notified boolean, t_created_at double precision,
               t_expires_at double precision, t_resolved_at double precision, t_payload bytea,
               t_payload_schema bytea,
               c_run text, c_epoch integer, c_wake_seq integer, c_workflow text, c_input bytea,
               c_resumed boolean, c_next_due double precision, s_kind integer,
               step_key text, step_status text, attempt integer, result bytea, error bytea,
               delivered integer,
               w_id text, w_run text, wait_key text, w_kind text, w_name text, w_step_key text,
               w_status text, notified boolean, created_at double precision,
               expires_at double precision, resolved_at double precision, payload bytea,
               payload_schema bytea,
               scope text, name text, value bytea, revision integer)
LANGUAGE plpgsql AS $$
DECLARE
    w waits%ROWTYPE;
    v_outcome text;
BEGIN
    SELECT * INTO w FROM waits WHERE waits.token_digest = p_digest;
    IF NOT FOUND THEN  -- a token handed out again later (wait_tokens)
        SELECT * INTO w FROM waits
        WHERE waits.id = (SELECT wt.wait_id FROM wait_tokens wt WHERE wt.token_digest = p_digest);
        IF NOT FOUND THEN
            d_outcome := 'unknown';
            RETURN NEXT;
            RETURN;
        END IF;
    END IF;
    IF w.payload_schema IS NOT NULL THEN
        v_outcome := 'terms';
    ELSE
        PERFORM 1 FROM runs WHERE runs.id = w.run_id FOR UPDATE SKIP LOCKED;
        IF NOT FOUND THEN
            v_outcome := 'busy';
        ELSE
            v_outcome := pyworkflow_decide(w.id, w.run_id, p_payload, p_now);
            IF v_outcome = 'ok' AND p_owner IS NOT NULL THEN
                RETURN QUERY SELECT v_outcome, w.id, w.run_id, w.wait_key, w.kind, w.name, w.step_key,
                                    w.status, w.notified, w.created_at, w.expires_at, w.resolved_at,
                                    w.payload, w.payload_schema, s.*
                    FROM pyworkflow_claim_with_states('run', w.run_id, p_owner, 1, p_now, p_ttl, p_max_crashes) s;
                IF FOUND THEN
                    RETURN;  -- claimed here: no other runtime has anything to take
                END IF;
            END IF;
            IF v_outcome IN ('ok', 'expired') THEN
                PERFORM pg_notify('pyworkflow_queue', '');
            END IF;
        END IF;
    END IF;
    d_outcome := v_outcome;
    t_id := w.id; t_run := w.run_id; t_wait_key := w.wait_key; t_kind := w.kind; t_name := w.name;
    t_step_key := w.step_key; t_status := w.status; t_notified := w.notified;
    t_created_at := w.created_at; t_expires_at := w.expires_at; t_resolved_at := w.resolved_at;
    t_payload := w.payload; t_payload_schema := w.payload_schema;
    RETURN NEXT;
END $$;
