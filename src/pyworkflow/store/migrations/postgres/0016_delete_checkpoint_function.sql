-- Delete a checkpoint in one statement, as saving one is (pyworkflow_save_checkpoint, 0002).
-- PostgresStore.delete_checkpoint ran a transaction on the async pool: the fence, the delete and
-- its event, each waiting for the one before it (about three round trips), where the other turn
-- writes are one statement committed in a group by the store's writers. Returns the fence's
-- refusal, or 'ok:1' (deleted, with a checkpoint_deleted event) or 'ok:0' (there was none:
-- nothing written).
CREATE FUNCTION pyworkflow_delete_checkpoint(p_run text, p_epoch integer, p_scope text, p_name text,
                                             p_now double precision)
RETURNS text
LANGUAGE plpgsql AS $$
DECLARE
    v_fence text;
BEGIN
    v_fence := pyworkflow_fence(p_run, p_epoch);
    IF v_fence <> 'ok' THEN
        RETURN v_fence;
    END IF;
    DELETE FROM checkpoints WHERE run_id = p_run AND scope = p_scope AND name = p_name;
    IF NOT FOUND THEN
        RETURN 'ok:0';
    END IF;
    PERFORM pyworkflow_event(p_run, p_now, 'checkpoint_deleted',
                             CASE WHEN p_name = '' THEN p_scope ELSE p_scope || '/' || p_name END, NULL);
    RETURN 'ok:1';
END $$;
