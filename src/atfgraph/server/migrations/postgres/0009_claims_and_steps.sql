-- Two of 0008's functions replaced. First, atfg_record_steps was a LANGUAGE sql function: PL/pgSQL callers re-plan its INSERT on
-- every call, and every leased write calls it, mostly with no steps at all (measured with
-- track_functions: 0.14 ms a call, three calls an approval cycle). As PL/pgSQL its plan is
-- cached for the session, and a call without steps returns before touching the table.
CREATE OR REPLACE FUNCTION atfg_record_steps(p_run text, p_attempt integer, p_now double precision,
                                             p_keys text[], p_seqs integer[], p_targets text[],
                                             p_statuses text[], p_results bytea[], p_errors bytea[])
RETURNS void
LANGUAGE plpgsql AS $$
BEGIN
    IF COALESCE(cardinality(p_keys), 0) = 0 THEN
        RETURN;
    END IF;
    INSERT INTO steps (run_id, step_key, seq, target, status, attempt, result, error, updated_at)
    SELECT p_run, u.k, u.s, u.t, u.st, p_attempt, u.r, u.e, p_now
    FROM unnest(p_keys, p_seqs, p_targets, p_statuses, p_results, p_errors) WITH ORDINALITY
         AS u(k, s, t, st, r, e, n)
    ORDER BY u.n
    ON CONFLICT (run_id, step_key) DO NOTHING;
END $$;

-- A claim in the name of a worker that has sent no heartbeat since p_silent_before gets nothing
-- (GraphStore.claim, SILENT_AFTER): an attempt re-dispatched after a lease ran out goes to a
-- worker that answers, not into a long poll that a frozen worker opened before it froze.
DROP FUNCTION atfg_claim(text, integer, double precision, double precision);

CREATE FUNCTION atfg_claim(p_worker text, p_limit integer, p_now double precision, p_expires double precision,
                           p_silent_before double precision)
RETURNS TABLE (t_id text, t_target text, t_node_id text, t_version text, t_status text, t_input bytea,
               t_result bytea, t_error bytea, t_attempt integer, t_max_attempts integer, t_epoch integer,
               t_lease_worker text, t_lease_expires_at double precision, t_waiting_on text,
               t_created_at double precision, t_updated_at double precision, t_finished_at double precision,
               t_checkpoints text, t_steps text, t_approvals text)
LANGUAGE plpgsql AS $$
DECLARE
    v_node text;
    v_version text;
    v_id text;
    v_seen double precision;
BEGIN
    SELECT node_id, version, last_seen INTO v_node, v_version, v_seen FROM atfg_workers WHERE id = p_worker;
    IF NOT FOUND THEN
        RETURN NEXT;
        RETURN;
    END IF;
    IF v_seen < p_silent_before THEN
        RETURN;  -- it stopped answering: nothing for its open long polls (GraphStore.claim)
    END IF;
    FOR v_id IN
        SELECT q.run_id FROM queue q JOIN runs r ON r.id = q.run_id
        WHERE q.node_id = v_node AND q.available_at <= p_now AND q.lease_owner IS NULL AND r.status = 'pending'
          AND (r.version IS NULL OR r.version = v_version)
        ORDER BY q.available_at LIMIT p_limit FOR UPDATE OF q, r SKIP LOCKED
    LOOP
        UPDATE runs SET status = 'running', attempt = attempt + 1, version = COALESCE(version, v_version),
            updated_at = p_now
        WHERE id = v_id AND status = 'pending';
        IF NOT FOUND THEN
            CONTINUE;  -- no longer queued (cancelled since it was read)
        END IF;
        UPDATE queue SET epoch = epoch + 1, lease_owner = p_worker, lease_expires_at = p_expires WHERE run_id = v_id;
        RETURN QUERY
        SELECT t.*,
               (SELECT json_agg(json_build_object('name', c.name, 'value', c.value, 'revision', c.revision))
                FROM checkpoints c WHERE c.run_id = v_id AND c.scope = '')::text,
               (SELECT json_agg(json_build_object(
                           'step_key', s.step_key, 'seq', s.seq, 'target', s.target, 'status', s.status,
                           'attempt', s.attempt, 'result', s.result, 'error', s.error)
                       ORDER BY s.seq, s.updated_at)
                FROM steps s WHERE s.run_id = v_id)::text,
               (SELECT json_agg(json_build_object(
                           'id', a.a_id, 'traverser_id', a.a_traverser_id, 'operation_key', a.a_operation_key,
                           'status', a.a_status, 'prompt', a.a_prompt, 'checkpoint', a.a_checkpoint,
                           'decided_by', a.a_decided_by, 'response', a.a_response,
                           'created_at', a.a_created_at, 'expires_at', a.a_expires_at,
                           'decided_at', a.a_decided_at)
                       ORDER BY a.a_created_at)
                FROM waits w, atfg_approval(w.id) a
                WHERE w.run_id = v_id AND w.kind = 'approval')::text
        FROM atfg_traverser(v_id) t;
    END LOOP;
END $$;
