-- A claim carries the state of the run it resumes. Until now a claim returned the run's fence,
-- workflow and input, and the runtime read the run's steps, waits and checkpoints in a second
-- round trip before replay could start (SQLite's claim already read them in its own
-- transaction). pyworkflow_claim_with_states makes a claim one round trip on PostgreSQL too: the
-- poll of a runtime's tick, a Celery turn's claim of one run and a claim of up to N runs each
-- return their claims and then the state of every resumed run among them.
--
-- The state is read by a statement after the claim, in the claim's transaction: under READ
-- COMMITTED it sees everything committed before the run's lock was taken, so nothing a turn
-- wrote before this claim is missed (a single statement joining the claim to the tables would
-- read them as of its own start, before the lock). The runs are leased to this claim, so no
-- other turn writes them until it ends.

-- Everything replay of p_run needs, one row per step (s_kind 1), wait (2) or checkpoint (3).
-- PostgresStore.load_state reads it too. One run, by equality on the tables' leading key column:
-- with an array (run_id = ANY) the generic plan of tables that grew without statistics read
-- every row (a sequential scan of each table), and each custom plan took a millisecond to make.
-- The first branch's NULLs are typed: UNION resolves column types pairwise, left to right.
CREATE FUNCTION pyworkflow_run_states(p_run text)
RETURNS TABLE (s_run text, s_kind integer,
               step_key text, step_status text, attempt integer, result bytea, error bytea,
               delivered integer,
               w_id text, w_run text, wait_key text, w_kind text, w_name text, w_step_key text,
               w_status text, notified boolean, created_at double precision,
               expires_at double precision, resolved_at double precision, payload bytea,
               payload_schema bytea,
               scope text, name text, value bytea, revision integer)
LANGUAGE sql STABLE AS $$
    SELECT run_id, 1, step_key, status, attempt, result, error, delivered,
           NULL::text, NULL::text, NULL::text, NULL::text, NULL::text, NULL::text, NULL::text,
           NULL::boolean, NULL::double precision, NULL::double precision, NULL::double precision,
           NULL::bytea, NULL::bytea,
           NULL::text, NULL::text, NULL::bytea, NULL::integer
    FROM steps WHERE run_id = p_run
    UNION ALL
    SELECT run_id, 2, NULL, NULL, NULL, NULL, NULL, NULL,
           id, run_id, wait_key, kind, name, step_key, status, notified, created_at, expires_at,
           resolved_at, payload, payload_schema,
           NULL, NULL, NULL, NULL
    FROM waits WHERE run_id = p_run
    UNION ALL
    SELECT run_id, 3, NULL, NULL, NULL, NULL, NULL, NULL,
           NULL, NULL, NULL, NULL, NULL, NULL, NULL, NULL, NULL, NULL, NULL, NULL, NULL,
           scope, name, value, revision
    FROM checkpoints WHERE run_id = p_run
$$;

-- A claim and the state of the runs it resumes, in one statement. p_mode says which claim:
-- 'poll' (pyworkflow_poll, a runtime's tick: up to p_limit runs, then a row with c_run NULL
-- carrying the next due time), 'run' (pyworkflow_claim_run: p_run if it is due and free) or
-- 'claim' (pyworkflow_claim: up to p_limit runs). The claims come first (s_kind NULL, as the
-- claim function returned them), then the state rows of the resumed ones (c_run is their run,
-- s_kind and the columns of pyworkflow_run_states). A first turn has no state to read.
CREATE FUNCTION pyworkflow_claim_with_states(p_mode text, p_run text, p_owner text, p_limit integer,
                                             p_now double precision, p_ttl double precision,
                                             p_max_crashes integer)
RETURNS TABLE (c_run text, c_epoch integer, c_wake_seq integer, c_workflow text, c_input bytea,
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
    claims refcursor;
    c record;
    v_run text;
    v_resumed text[] := '{}';
BEGIN
    IF p_mode = 'poll' THEN
        OPEN claims FOR SELECT p.c_run AS rid, p.c_epoch AS ep, p.c_wake_seq AS ws, p.c_workflow AS wf,
                               p.c_input AS inp, p.c_resumed AS res, p.c_next_due AS due
            FROM pyworkflow_poll(p_owner, p_limit, p_now, p_ttl, p_max_crashes) p;
    ELSIF p_mode = 'run' THEN
        OPEN claims FOR SELECT p.c_run AS rid, p.c_epoch AS ep, p.c_wake_seq AS ws, p.c_workflow AS wf,
                               p.c_input AS inp, p.c_resumed AS res, NULL::double precision AS due
            FROM pyworkflow_claim_run(p_run, p_owner, p_now, p_ttl, p_max_crashes) p;
    ELSIF p_mode = 'claim' THEN
        OPEN claims FOR SELECT p.c_run AS rid, p.c_epoch AS ep, p.c_wake_seq AS ws, p.c_workflow AS wf,
                               p.c_input AS inp, p.c_resumed AS res, NULL::double precision AS due
            FROM pyworkflow_claim(p_owner, p_limit, p_now, p_ttl, p_max_crashes) p;
    ELSE
        RAISE EXCEPTION 'pyworkflow_claim_with_states: unknown mode %', p_mode;
    END IF;
    LOOP
        FETCH claims INTO c;
        EXIT WHEN NOT FOUND;
        c_run := c.rid;
        c_epoch := c.ep;
        c_wake_seq := c.ws;
        c_workflow := c.wf;
        c_input := c.inp;
        c_resumed := c.res;
        c_next_due := c.due;
        RETURN NEXT;  -- the state columns are never assigned: NULL
        IF c.res THEN
            v_resumed := v_resumed || c.rid;
        END IF;
    END LOOP;
    CLOSE claims;
    FOREACH v_run IN ARRAY v_resumed LOOP
        RETURN QUERY SELECT s.s_run, NULL::integer, NULL::integer, NULL::text, NULL::bytea, NULL::boolean,
                            NULL::double precision, s.s_kind, s.step_key, s.step_status, s.attempt,
                            s.result, s.error, s.delivered, s.w_id, s.w_run, s.wait_key, s.w_kind,
                            s.w_name, s.w_step_key, s.w_status, s.notified, s.created_at,
                            s.expires_at, s.resolved_at, s.payload, s.payload_schema, s.scope,
                            s.name, s.value, s.revision
            FROM pyworkflow_run_states(v_run) s;
    END LOOP;
END $$;
