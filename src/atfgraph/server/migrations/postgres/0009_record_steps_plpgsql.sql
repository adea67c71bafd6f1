-- atfg_record_steps (0008) was a LANGUAGE sql function: PL/pgSQL callers re-plan its INSERT on
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
