-- A decision without the read before it. Service.decide reads an approval's terms (its response
-- schema, and whether it is assigned) before deciding, in a statement of its own, one of a
-- cycle's nine on PostgreSQL; both are written with the approval and never change after. This
-- decides at once when the approval declares no schema and has no assignment (atfg_decide, the
-- one rule of a decision), and otherwise answers the outcome 'terms' with nothing changed: the
-- caller then reads the terms and decides as before.
CREATE OR REPLACE FUNCTION atfg_decide_plain(p_id text, p_decision text, p_response bytea, p_decided_by text,
                                             p_now double precision, p_audit text[], p_detail bytea)
RETURNS TABLE (o_outcome text, o_node text, a_id text, a_traverser_id text, a_operation_key text,
               a_status text, a_prompt bytea, a_checkpoint bytea, a_decided_by text, a_response bytea,
               a_created_at double precision, a_expires_at double precision, a_decided_at double precision)
LANGUAGE plpgsql AS $$
BEGIN
    IF EXISTS (SELECT 1 FROM waits w WHERE w.id = p_id AND w.kind || '' = 'approval'
               AND (w.payload_schema IS NOT NULL
                    OR EXISTS (SELECT 1 FROM atfg_assignments a WHERE a.wait_id = w.id))) THEN
        o_outcome := 'terms';
        RETURN NEXT;
        RETURN;
    END IF;
    RETURN QUERY SELECT * FROM atfg_decide(p_id, p_decision, p_response, p_decided_by, p_now, p_audit, p_detail);
END $$;
