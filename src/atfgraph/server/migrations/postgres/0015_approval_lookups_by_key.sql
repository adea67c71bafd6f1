-- An approval is found by its key, and its kind is then tested on the row found, never searched
-- for: the kind is written `w.kind || '' = 'approval'`, which no index can serve. With
-- `w.kind = 'approval'` the planner could serve the lookup with waits_by_kind (kind, status,
-- created_at) instead of the primary key or the (run_id, wait_key) index. It did on a new
-- database: while waits has no statistics the two look equally cheap, PL/pgSQL keeps the plan it
-- chose for the session, and every decision, approval request and claim then scanned every
-- approval (0.17 to 0.27 ms a lookup after 1,750 approval cycles, growing with each, until
-- autovacuum's first ANALYZE; bench.atfgraph_cycles on PostgreSQL). The same four functions,
-- changed only there. The statements the server sends itself are written the same way
-- (_graph_sql.IS_APPROVAL).
--
-- The claim also returns each approval's response schema, which the server read afterwards with
-- a statement of its own, a blocking round trip on its event loop for each task with approvals.

CREATE OR REPLACE FUNCTION atfg_approval(p_id text)
RETURNS TABLE (a_id text, a_traverser_id text, a_operation_key text, a_status text, a_prompt bytea,
               a_checkpoint bytea, a_decided_by text, a_response bytea, a_created_at double precision,
               a_expires_at double precision, a_decided_at double precision)
LANGUAGE sql STABLE AS $$
    SELECT w.id, w.run_id, w.wait_key,
           CASE w.status WHEN 'received' THEN w.decision WHEN 'cancelled' THEN 'expired' ELSE w.status END,
           w.prompt, w.checkpoint,
           COALESCE(w.decided_by, CASE w.status WHEN 'expired' THEN 'system:expiry'
                                                WHEN 'cancelled' THEN 'system:cancelled' END),
           w.payload, w.created_at, w.expires_at, w.resolved_at
    FROM waits w WHERE w.id = p_id AND w.kind || '' = 'approval'
$$;

CREATE OR REPLACE FUNCTION atfg_request_approval(p_run text, p_epoch integer, p_key text, p_prompt bytea,
                                      p_checkpoint bytea, p_expires_at double precision, p_pause boolean,
                                      p_id text, p_now double precision,
                                      p_keys text[], p_seqs integer[], p_targets text[], p_statuses text[],
                                      p_results bytea[], p_errors bytea[], p_audit text[], p_detail bytea)
RETURNS TABLE (o_outcome text, o_paused boolean, a_id text, a_traverser_id text, a_operation_key text,
               a_status text, a_prompt bytea, a_checkpoint bytea, a_decided_by text, a_response bytea,
               a_created_at double precision, a_expires_at double precision, a_decided_at double precision)
LANGUAGE plpgsql AS $$
DECLARE
    l record;
    v_status text;
    v_id text;
    v_wait_status text;
    v_prompt bytea;
    v_paused boolean := false;
BEGIN
    IF p_epoch IS NOT NULL THEN
        SELECT * INTO l FROM atfg_leased(p_run, p_epoch, p_now);
        IF l.o_outcome <> 'ok' THEN
            o_outcome := l.o_outcome;
            RETURN NEXT;
            RETURN;
        END IF;
    ELSE
        IF p_pause THEN
            o_outcome := 'lease_required';
            RETURN NEXT;
            RETURN;
        END IF;
        SELECT status INTO v_status FROM runs WHERE id = p_run AND node_id IS NOT NULL FOR UPDATE;
        IF NOT FOUND THEN
            o_outcome := 'missing';
            RETURN NEXT;
            RETURN;
        END IF;
        IF v_status IN ('completed', 'failed', 'cancelled') THEN
            o_outcome := 'invalid_state:' || CASE v_status WHEN 'completed' THEN 'succeeded' ELSE v_status END;
            RETURN NEXT;
            RETURN;
        END IF;
    END IF;
    SELECT id, status, prompt INTO v_id, v_wait_status, v_prompt
    FROM waits w WHERE w.run_id = p_run AND w.wait_key = p_key AND w.kind || '' = 'approval';
    IF FOUND AND v_prompt IS DISTINCT FROM p_prompt THEN
        o_outcome := 'fallback';
        RETURN NEXT;
        RETURN;
    END IF;
    IF p_epoch IS NOT NULL THEN
        PERFORM atfg_record_steps(p_run, l.o_attempt, p_now, p_keys, p_seqs, p_targets, p_statuses,
                                  p_results, p_errors);
    END IF;
    IF v_id IS NULL THEN
        v_id := p_id;
        v_wait_status := 'pending';
        INSERT INTO waits (id, run_id, wait_key, kind, name, step_key, status, created_at, expires_at, prompt,
                           checkpoint)
        VALUES (p_id, p_run, p_key, 'approval', p_key, '', 'pending', p_now, p_expires_at, p_prompt, p_checkpoint);
        PERFORM atfg_audit(p_now, p_audit, p_detail);
    END IF;
    -- The approval as it is before the pause (a pause changes the run, not the approval).
    RETURN QUERY SELECT 'ok'::text, p_pause AND v_wait_status = 'pending', a.* FROM atfg_approval(v_id) a;
    IF p_pause AND v_wait_status = 'pending' THEN
        UPDATE runs SET status = 'suspended', waiting_on = v_id, updated_at = p_now
        WHERE id = p_run AND status = 'running';
        DELETE FROM queue WHERE run_id = p_run;
    END IF;
END $$;

CREATE OR REPLACE FUNCTION atfg_decide(p_id text, p_decision text, p_response bytea, p_decided_by text,
                            p_now double precision, p_audit text[], p_detail bytea)
RETURNS TABLE (o_outcome text, o_node text, a_id text, a_traverser_id text, a_operation_key text,
               a_status text, a_prompt bytea, a_checkpoint bytea, a_decided_by text, a_response bytea,
               a_created_at double precision, a_expires_at double precision, a_decided_at double precision)
LANGUAGE plpgsql AS $$
DECLARE
    v_run text;
    v_count integer;
    v_api_status text;
    v_payload bytea;
    v_node text;
BEGIN
    SELECT w.run_id INTO v_run FROM waits w WHERE w.id = p_id AND w.kind || '' = 'approval';
    IF NOT FOUND THEN
        o_outcome := 'missing';
        RETURN NEXT;
        RETURN;
    END IF;
    PERFORM 1 FROM runs WHERE id = v_run FOR UPDATE;
    SELECT CASE status WHEN 'received' THEN decision WHEN 'cancelled' THEN 'expired' ELSE status END, payload
    INTO v_api_status, v_payload
    FROM waits WHERE id = p_id FOR UPDATE;
    IF v_api_status <> 'pending' THEN
        IF v_api_status = p_decision THEN  -- the same decision again: idempotent
            IF v_payload IS DISTINCT FROM p_response THEN
                o_outcome := 'fallback';
                RETURN NEXT;
                RETURN;
            END IF;
            PERFORM atfg_audit(p_now, p_audit, p_detail);
            RETURN QUERY SELECT 'same'::text, NULL::text, a.* FROM atfg_approval(p_id) a;
            RETURN;
        END IF;
        o_outcome := 'decided:' || v_api_status;
        RETURN NEXT;
        RETURN;
    END IF;
    UPDATE waits SET status = 'received', decision = p_decision, decided_by = p_decided_by, payload = p_response,
        resolved_at = p_now
    WHERE id = p_id AND status = 'pending';
    GET DIAGNOSTICS v_count = ROW_COUNT;
    IF v_count = 0 THEN
        o_outcome := 'decided:pending';
        RETURN NEXT;
        RETURN;
    END IF;
    v_node := pyworkflow_wake(v_run, p_id, p_now);
    PERFORM atfg_audit(p_now, p_audit, p_detail);
    RETURN QUERY SELECT 'ok'::text, v_node, a.* FROM atfg_approval(p_id) a;
END $$;

CREATE OR REPLACE FUNCTION atfg_claim(p_worker text, p_limit integer, p_now double precision, p_expires double precision,
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
                           'decided_at', a.a_decided_at, 'response_schema', w.payload_schema)
                       ORDER BY a.a_created_at)
                FROM waits w, atfg_approval(w.id) a
                WHERE w.run_id = v_id AND w.kind || '' = 'approval')::text
        FROM atfg_traverser(v_id) t;
    END LOOP;
END $$;
