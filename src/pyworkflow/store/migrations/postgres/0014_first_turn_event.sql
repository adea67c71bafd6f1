-- A run's first turn writes no run_resumed event. A run that the starting process leased itself
-- (create_run with a lease owner) never had one, while a pending run claimed by a poll or a Celery
-- turn got a run_resumed though it had never run: the same run read differently by who took its
-- first turn, and under a backlog of starts nearly every run carried one row (and one key of
-- events_pkey) more, about 140 bytes a run on PostgreSQL. Now run_resumed means a suspended (or
-- released) run's next turn and run_recovered a turn after a crash, as before; a run's history
-- starts with run_created. The rest of pyworkflow_claim_row is 0008's, unchanged. SQLite's copy
-- of the rule is _claim_row in pyworkflow/store/_sqlite.py.
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
    IF p_prev IS NOT NULL THEN
        PERFORM pyworkflow_event(p_run, p_now, 'run_recovered', NULL, NULL);
    ELSIF p_status <> 'pending' THEN
        PERFORM pyworkflow_event(p_run, p_now, 'run_resumed', NULL, NULL);
    END IF;
    c_run := p_run;
    c_epoch := p_epoch + 1;
    c_wake_seq := p_wake_seq;
    c_workflow := p_workflow;
    c_input := p_input;
    c_resumed := p_status <> 'pending';
    RETURN NEXT;
END $$;
