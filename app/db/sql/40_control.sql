-- Who answers a thread (agent, queued, human), changed compare-and-set on its version by
-- cs_control; nothing when the version is stale or the action is not allowed from the
-- state. Each change is kept in control_history. A deleted thread forgets its control.

CREATE OR REPLACE FUNCTION cs_control(
    p_thread text, p_action text, p_version bigint, p_actor text, p_actor_name text,
    p_to text, p_to_name text, p_note text, p_summary text, p_reason text
) RETURNS SETOF thread_leases LANGUAGE plpgsql AS $$
DECLARE
    cur thread_leases%ROWTYPE;
    next_control text;
    next_assignee text;
    next_name text;
BEGIN
    INSERT INTO thread_leases (thread_id, generation, owner, run_id, expires_at)
    VALUES (p_thread, 0, '', NULL, clock_timestamp())
    ON CONFLICT (thread_id) DO NOTHING;
    SELECT * INTO cur FROM thread_leases l WHERE l.thread_id = p_thread FOR UPDATE;
    IF p_version IS NOT NULL AND cur.control_version <> p_version THEN
        RETURN;
    END IF;
    IF p_action = 'handoff' AND cur.control = 'agent' THEN
        next_control := 'queued';
    ELSIF p_action = 'accept' AND cur.control = 'queued' THEN
        next_control := 'human'; next_assignee := p_actor; next_name := p_actor_name;
    ELSIF p_action = 'take_over' AND cur.control IN ('agent', 'queued') THEN
        next_control := 'human'; next_assignee := p_actor; next_name := p_actor_name;
    ELSIF p_action = 'transfer' AND cur.control = 'human' AND cur.assignee = p_actor
          AND p_to IS NOT NULL THEN
        next_control := 'human'; next_assignee := p_to; next_name := p_to_name;
    ELSIF p_action = 'release' AND cur.control = 'human' AND cur.assignee = p_actor THEN
        next_control := 'agent';
    ELSE
        RETURN;
    END IF;
    UPDATE thread_leases l SET
        control = next_control,
        control_version = cur.control_version + 1,
        assignee = next_assignee,
        assignee_name = next_name,
        control_summary = CASE WHEN p_action = 'handoff' THEN p_summary
                               WHEN next_control = 'agent' THEN NULL
                               ELSE cur.control_summary END,
        control_reason = CASE WHEN p_action = 'handoff' THEN p_reason
                              WHEN p_action = 'take_over' THEN 'taken over'
                              WHEN next_control = 'agent' THEN NULL
                              ELSE cur.control_reason END,
        control_since = CASE WHEN next_control = cur.control THEN cur.control_since
                             ELSE now() END
    WHERE l.thread_id = p_thread;
    INSERT INTO control_history (thread_id, version, action, actor, control, assignee, note)
    VALUES (p_thread, cur.control_version + 1, p_action, p_actor, next_control,
            next_assignee, p_note);
    RETURN QUERY SELECT * FROM thread_leases l WHERE l.thread_id = p_thread;
END $$;

CREATE OR REPLACE FUNCTION cs_forget_thread_control() RETURNS trigger LANGUAGE plpgsql AS $$
BEGIN
    DELETE FROM thread_events WHERE thread_id = OLD.thread_id;
    DELETE FROM control_history WHERE thread_id = OLD.thread_id;
    UPDATE thread_leases SET control = 'agent', control_version = control_version + 1,
           assignee = NULL, assignee_name = NULL, control_summary = NULL,
           control_reason = NULL, control_since = NULL
    WHERE thread_id = OLD.thread_id AND control <> 'agent';
    RETURN OLD;
END $$;

CREATE OR REPLACE TRIGGER threads_forget_control AFTER DELETE ON threads
    FOR EACH ROW EXECUTE FUNCTION cs_forget_thread_control();
