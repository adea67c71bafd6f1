-- The submission as in migration 0008, its insert naming the condition of the runs' index by
-- idempotency key, which holds the keyed runs only since pyworkflow migration postgres 0020 (an
-- ON CONFLICT that names no condition matches no partial index). Naming it matches the whole
-- index of a database not yet at 0020 as well.
CREATE OR REPLACE FUNCTION atfg_submit(p_id text, p_target text, p_input bytea, p_node text,
                                       p_max_attempts integer, p_key text, p_now double precision,
                                       p_audit text[], p_detail bytea)
RETURNS TABLE (o_outcome text, t_id text, t_target text, t_node_id text, t_version text, t_status text,
               t_input bytea, t_result bytea, t_error bytea, t_attempt integer, t_max_attempts integer,
               t_epoch integer, t_lease_worker text, t_lease_expires_at double precision, t_waiting_on text,
               t_created_at double precision, t_updated_at double precision, t_finished_at double precision)
LANGUAGE plpgsql AS $$
BEGIN
    IF p_key IS NOT NULL AND EXISTS (SELECT 1 FROM runs WHERE idempotency_key = p_key) THEN
        o_outcome := 'fallback';
        RETURN NEXT;
        RETURN;
    END IF;
    INSERT INTO runs (id, workflow, status, input, node_id, attempt, max_attempts, idempotency_key,
                      created_at, updated_at)
    VALUES (p_id, p_target, 'pending', p_input, p_node, 0, p_max_attempts, p_key, p_now, p_now)
    ON CONFLICT (idempotency_key) WHERE idempotency_key IS NOT NULL DO NOTHING;
    IF NOT FOUND THEN  -- a submission with this key committed on another server meanwhile
        o_outcome := 'fallback';
        RETURN NEXT;
        RETURN;
    END IF;
    INSERT INTO queue (run_id, available_at, epoch, node_id) VALUES (p_id, p_now, 0, p_node);
    PERFORM atfg_audit(p_now, p_audit, p_detail);
    RETURN QUERY SELECT 'ok'::text, t.* FROM atfg_traverser(p_id) t;
END $$;
