-- The graph store's hot transitions as server-side functions: each is one statement, sent by the
-- kit's writer in a pipelined group (one round trip for many callers' transitions, no BEGIN/COMMIT
-- per transition), instead of a write function of five to ten statements, one round trip each.
-- Each is PostgreSQL's copy of a rule written in Python for SQLite in atfgraph/server/_store.py
-- (same refusals, same rows written): it locks the traverser's runs row first (FOR UPDATE), then
-- touches its queue row, steps, checkpoints and waits, and returns an outcome ('ok' or why it
-- refused) that the client turns into the same refusal. A refusal writes nothing: the checks come
-- before the first write. The audit entry of a transition is written inside its function, so it
-- is in the same transaction. A function runs in the caller's transaction, and in READ COMMITTED
-- each statement after the lock sees fresh data.

-- The traverser's lock and its lease fence (GraphStore._leased): 'ok' with the run's attempt,
-- 'missing' (no such traverser), or 'lease_lost' (not running, another epoch, or expired).
CREATE FUNCTION atfg_leased(p_run text, p_epoch integer, p_now double precision,
                            OUT o_outcome text, OUT o_attempt integer, OUT o_max_attempts integer,
                            OUT o_error bytea)
LANGUAGE plpgsql AS $$
DECLARE
    v_status text;
    v_epoch integer;
    v_expires double precision;
BEGIN
    SELECT r.status, r.attempt, r.max_attempts, r.error, q.epoch, q.lease_expires_at
    INTO v_status, o_attempt, o_max_attempts, o_error, v_epoch, v_expires
    FROM runs r LEFT JOIN queue q ON q.run_id = r.id
    WHERE r.id = p_run AND r.node_id IS NOT NULL FOR UPDATE OF r;
    IF NOT FOUND THEN
        o_outcome := 'missing';
    ELSIF v_status <> 'running' OR v_epoch IS DISTINCT FROM p_epoch OR COALESCE(v_expires < p_now, true) THEN
        o_outcome := 'lease_lost';
    ELSE
        o_outcome := 'ok';
    END IF;
END $$;

-- The child steps a worker reports with its write (GraphStore._record_steps): each recorded once,
-- never overwritten, in the order given. Statuses as the engine records them.
CREATE FUNCTION atfg_record_steps(p_run text, p_attempt integer, p_now double precision, p_keys text[],
                                  p_seqs integer[], p_targets text[], p_statuses text[], p_results bytea[],
                                  p_errors bytea[]) RETURNS void
LANGUAGE sql AS $$
    INSERT INTO steps (run_id, step_key, seq, target, status, attempt, result, error, updated_at)
    SELECT p_run, u.k, u.s, u.t, u.st, p_attempt, u.r, u.e, p_now
    FROM unnest(p_keys, p_seqs, p_targets, p_statuses, p_results, p_errors) WITH ORDINALITY
         AS u(k, s, t, st, r, e, n)
    ORDER BY u.n
    ON CONFLICT (run_id, step_key) DO NOTHING
$$;

-- An audit entry (write_audit; the client bounds and encodes it): p_audit is (principal, role,
-- action, target, outcome), NULL for none.
CREATE FUNCTION atfg_audit(p_at double precision, p_audit text[], p_detail bytea) RETURNS void
LANGUAGE plpgsql AS $$
BEGIN
    IF p_audit IS NOT NULL THEN
        INSERT INTO atfg_audit (at, principal, role, action, target, outcome, detail)
        VALUES (p_at, p_audit[1], p_audit[2], p_audit[3], p_audit[4], p_audit[5], p_detail);
    END IF;
END $$;

-- A traverser as the API names its fields (_graph_sql.TRAVERSER_ROW).
CREATE FUNCTION atfg_traverser(p_run text)
RETURNS TABLE (t_id text, t_target text, t_node_id text, t_version text, t_status text, t_input bytea,
               t_result bytea, t_error bytea, t_attempt integer, t_max_attempts integer, t_epoch integer,
               t_lease_worker text, t_lease_expires_at double precision, t_waiting_on text,
               t_created_at double precision, t_updated_at double precision, t_finished_at double precision)
LANGUAGE sql STABLE AS $$
    SELECT r.id, r.workflow, r.node_id, r.version,
           CASE r.status WHEN 'pending' THEN 'queued' WHEN 'suspended' THEN 'waiting'
                         WHEN 'completed' THEN 'succeeded' ELSE r.status END,
           r.input, r.result, r.error, r.attempt, r.max_attempts, q.epoch, q.lease_owner,
           q.lease_expires_at, r.waiting_on, r.created_at, r.updated_at, r.finished_at
    FROM runs r LEFT JOIN queue q ON q.run_id = r.id
    WHERE r.id = p_run AND r.node_id IS NOT NULL
$$;

-- An approval as the API names its fields (_graph_sql.APPROVAL_ROW).
CREATE FUNCTION atfg_approval(p_id text)
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
    FROM waits w WHERE w.id = p_id AND w.kind = 'approval'
$$;

-- Lease up to p_limit queued traversers of the worker's node that its version may run
-- (GraphStore.claim): each a new attempt under a new epoch, returned with what its handler reads
-- on replay, as JSON text (checkpoints, steps in path order, approvals oldest first; bytea values
-- as PostgreSQL writes them in JSON, '\x' and hex). Rows another server holds are skipped, so it
-- never waits on a lock. An unknown worker: one row of NULLs.
CREATE FUNCTION atfg_claim(p_worker text, p_limit integer, p_now double precision, p_expires double precision)
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
BEGIN
    SELECT node_id, version INTO v_node, v_version FROM atfg_workers WHERE id = p_worker;
    IF NOT FOUND THEN
        RETURN NEXT;
        RETURN;
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

-- Save a checkpoint under the lease (GraphStore.save_checkpoint), with the steps reported:
-- 'ok:<new revision>', 'missing', 'lease_lost' or 'conflict:<current revision>' (the kit's
-- compare-and-set rule, pyworkflow.store.write_checkpoint).
CREATE FUNCTION atfg_save_checkpoint(p_run text, p_epoch integer, p_name text, p_value bytea,
                                     p_expected integer, p_now double precision, p_keys text[],
                                     p_seqs integer[], p_targets text[], p_statuses text[],
                                     p_results bytea[], p_errors bytea[]) RETURNS text
LANGUAGE plpgsql AS $$
DECLARE
    l record;
    v_current integer;
BEGIN
    SELECT * INTO l FROM atfg_leased(p_run, p_epoch, p_now);
    IF l.o_outcome <> 'ok' THEN
        RETURN l.o_outcome;
    END IF;
    SELECT revision INTO v_current FROM checkpoints WHERE run_id = p_run AND scope = '' AND name = p_name;
    v_current := COALESCE(v_current, 0);
    IF p_expected IS NOT NULL AND p_expected <> v_current THEN
        RETURN 'conflict:' || v_current;
    END IF;
    PERFORM atfg_record_steps(p_run, l.o_attempt, p_now, p_keys, p_seqs, p_targets, p_statuses, p_results,
                              p_errors);
    INSERT INTO checkpoints (run_id, scope, name, value, revision, updated_at)
    VALUES (p_run, '', p_name, p_value, v_current + 1, p_now)
    ON CONFLICT (run_id, scope, name) DO UPDATE
    SET value = EXCLUDED.value, revision = EXCLUDED.revision, updated_at = EXCLUDED.updated_at;
    RETURN 'ok:' || (v_current + 1);
END $$;

-- Find or create the approval (traverser, operation key) and, with p_pause, park the traverser
-- on it while it is pending (GraphStore.request_approval). p_epoch NULL: no lease (no steps, no
-- pause). One row: the outcome ('ok', 'missing', 'lease_lost', 'lease_required',
-- 'invalid_state:<status>', or 'fallback': the approval exists with other prompt bytes, nothing
-- was written, and the client runs the Python rule, which compares the prompts as JSON), whether
-- it paused, and the approval. A new approval gets the id p_id and the audit entry.
CREATE FUNCTION atfg_request_approval(p_run text, p_epoch integer, p_key text, p_prompt bytea,
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
    FROM waits WHERE run_id = p_run AND wait_key = p_key AND kind = 'approval';
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

-- Decide an approval (GraphStore.decide), locking its run first, then the wait: the run parked on
-- it continues by the engine's wake (pyworkflow_wake), and the audit entry (p_detail: the
-- decision with p_response) is written. One row: the outcome ('ok', 'same': the same decision
-- again, audited, nothing else changed; 'missing'; 'decided:<status>': another decision or an
-- expiry came first; 'fallback': the same decision again with another stored response, nothing
-- written, the client runs the Python rule), the node to wake and the approval.
CREATE FUNCTION atfg_decide(p_id text, p_decision text, p_response bytea, p_decided_by text,
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
    SELECT run_id INTO v_run FROM waits WHERE id = p_id AND kind = 'approval';
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

-- End an attempt under the lease (GraphStore.complete, fail, release), with the steps reported.
-- p_outcome: 'succeeded' (p_value the result), 'failed' (p_value the error: queued again while
-- attempts remain and p_retryable, else failed), 'released' (queued again, the attempt not
-- charged, the error kept). Returns 'missing', 'lease_lost', or the traverser's new status
-- ('succeeded', 'queued', 'failed').
CREATE FUNCTION atfg_end_attempt(p_run text, p_epoch integer, p_outcome text, p_value bytea,
                                 p_retryable boolean, p_now double precision, p_keys text[], p_seqs integer[],
                                 p_targets text[], p_statuses text[], p_results bytea[], p_errors bytea[])
RETURNS text
LANGUAGE plpgsql AS $$
DECLARE
    l record;
BEGIN
    SELECT * INTO l FROM atfg_leased(p_run, p_epoch, p_now);
    IF l.o_outcome <> 'ok' THEN
        RETURN l.o_outcome;
    END IF;
    PERFORM atfg_record_steps(p_run, l.o_attempt, p_now, p_keys, p_seqs, p_targets, p_statuses, p_results,
                              p_errors);
    IF p_outcome = 'succeeded' THEN
        UPDATE runs SET status = 'completed', result = p_value, error = NULL, updated_at = p_now, finished_at = p_now
        WHERE id = p_run;
        DELETE FROM queue WHERE run_id = p_run;
        RETURN 'succeeded';
    END IF;
    IF p_outcome = 'released' OR (p_retryable AND l.o_attempt < l.o_max_attempts) THEN
        UPDATE runs SET status = 'pending',
            error = CASE WHEN p_outcome = 'released' THEN l.o_error ELSE p_value END,
            max_attempts = max_attempts + CASE WHEN p_outcome = 'released' THEN 1 ELSE 0 END, updated_at = p_now
        WHERE id = p_run;
        UPDATE queue SET lease_owner = NULL, lease_expires_at = NULL, available_at = p_now WHERE run_id = p_run;
        RETURN 'queued';
    END IF;
    UPDATE runs SET status = 'failed', result = NULL, error = p_value, updated_at = p_now, finished_at = p_now
    WHERE id = p_run;
    DELETE FROM queue WHERE run_id = p_run;
    RETURN 'failed';
END $$;

-- Create a traverser, queued for its first claim, with its audit entry (GraphStore.submit). One
-- row: 'ok' and the traverser, or 'fallback' when its idempotency key is taken (nothing written:
-- the client runs the Python rule, which compares the earlier submission's input as JSON).
CREATE FUNCTION atfg_submit(p_id text, p_target text, p_input bytea, p_node text, p_max_attempts integer,
                            p_key text, p_now double precision, p_audit text[], p_detail bytea)
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
    ON CONFLICT (idempotency_key) DO NOTHING;
    IF NOT FOUND THEN  -- a submission with this key committed on another server meanwhile
        o_outcome := 'fallback';
        RETURN NEXT;
        RETURN;
    END IF;
    INSERT INTO queue (run_id, available_at, epoch, node_id) VALUES (p_id, p_now, 0, p_node);
    PERFORM atfg_audit(p_now, p_audit, p_detail);
    RETURN QUERY SELECT 'ok'::text, t.* FROM atfg_traverser(p_id) t;
END $$;
