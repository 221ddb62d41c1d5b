-- The statement that opens a run, and the checkpoint it starts from.
--
-- cs_latest_checkpoint is VOLATILE: it takes its own snapshot after the claim, so it sees
-- every commit of the run the claim waited for (a lateral join in the calling statement
-- would read the statement's older snapshot: a fork). Its query is upstream's own
-- (`SELECT_SQL` of langgraph-checkpoint-postgres, put in place of
-- the placeholder below when this file is applied), so its row loads as upstream's.
--
-- cs_begin_run: in one round trip, the post rate (cs_gcra) and the day's token budget, the
-- lease claim, who answers the thread (control, read under the claim), the run's record,
-- and the checkpoint. status: started | human (a person holds the thread: the message is
-- stored, no run) | duplicate (this client_message_id has a run: earlier_*) | busy
-- (busy_for_s) | rate_limited (ahead_s) | budget_exhausted (day_left_s) | deleted (a late
-- copy of a message of a deleted conversation). Only started, human and duplicate hold the
-- claim (generation). policy_version: the rules that answer (a first turn pins the thread).

CREATE OR REPLACE FUNCTION cs_latest_checkpoint(p_thread text)
RETURNS TABLE (
    thread_id text, checkpoint jsonb, checkpoint_ns text, checkpoint_id text,
    parent_checkpoint_id text, metadata jsonb, channel_values bytea[],
    pending_writes bytea[]
) LANGUAGE plpgsql VOLATILE AS $$
#variable_conflict use_column
BEGIN
    RETURN QUERY {upstream_checkpoint_select}
    WHERE checkpoints.thread_id = p_thread AND checkpoints.checkpoint_ns = ''
    ORDER BY checkpoints.checkpoint_id DESC LIMIT 1;
END $$;

CREATE OR REPLACE FUNCTION cs_begin_run(
    p_thread text, p_user text, p_session text, p_owner text, p_run text, p_ttl_ms int,
    p_client_message_id text, p_rate_key text, p_interval_s float8, p_window_s float8,
    p_budget bigint,
    OUT status text, OUT generation bigint, OUT stale_run text, OUT busy_for_s float8,
    OUT ahead_s float8, OUT day_left_s float8,
    OUT earlier_run text, OUT earlier_status text, OUT earlier_result jsonb,
    OUT checkpoint jsonb, OUT checkpoint_id text, OUT parent_checkpoint_id text,
    OUT metadata jsonb, OUT channel_values bytea[], OUT pending_writes bytea[],
    OUT control text, OUT policy_version int
) LANGUAGE plpgsql AS $$
DECLARE
    spent bigint;
    pinned int;
    pinned_state text;
    known boolean := false;
BEGIN
    IF p_rate_key IS NOT NULL THEN
        SELECT g.ahead_s INTO ahead_s FROM cs_gcra(p_rate_key, p_interval_s, p_window_s) g
        WHERE NOT g.allowed;
        IF FOUND THEN
            status := 'rate_limited';
            RETURN;
        END IF;
    END IF;
    IF p_budget > 0 THEN
        SELECT u.tokens INTO spent FROM token_usage u
        WHERE u.user_id = p_user AND u.day = (now() AT TIME ZONE 'UTC')::date;
        IF coalesce(spent, 0) >= p_budget THEN
            status := 'budget_exhausted';
            day_left_s := extract(epoch FROM
                date_trunc('day', now(), 'UTC') + interval '1 day' - now())::float8;
            RETURN;
        END IF;
    END IF;
    SELECT c.generation, c.stale_run INTO generation, stale_run
    FROM cs_claim_thread(p_thread, p_owner, p_run, p_ttl_ms) c;
    IF generation IS NULL THEN
        status := 'busy';
        SELECT greatest(0, extract(epoch FROM l.expires_at - clock_timestamp()))::float8
        INTO busy_for_s FROM thread_leases l WHERE l.thread_id = p_thread;
        RETURN;
    END IF;
    -- A late copy of a message of a deleted conversation (its client, cut off, sent it
    -- again elsewhere, had its answer and deleted the thread; this copy was held up on
    -- its way) must not start the conversation over. Checked under the claim: a
    -- delete holds the lease until it commits, so its message ids are visible here.
    IF p_client_message_id IS NOT NULL
       AND NOT EXISTS (SELECT 1 FROM threads t WHERE t.thread_id = p_thread)
       AND EXISTS (SELECT 1 FROM deleted_messages d
                   WHERE d.thread_id = p_thread
                     AND d.client_message_id = p_client_message_id) THEN
        UPDATE thread_leases l SET run_id = NULL, expires_at = clock_timestamp()
        WHERE l.thread_id = p_thread AND l.run_id = p_run;
        status := 'deleted';
        generation := NULL;
        stale_run := NULL;
        RETURN;
    END IF;
    -- the claim locked the lease row: who answers cannot change until this commits
    SELECT l.control INTO control FROM thread_leases l WHERE l.thread_id = p_thread;
    -- The policy version that answers (app/policies): the thread's pin while its version
    -- is published; else (a first turn, or a version retired since) the candidate by the
    -- thread id's bucket on a first turn, else live. Written only when it changes.
    IF control = 'agent' THEN
        SELECT t.policy_version, v.state INTO pinned, pinned_state
        FROM threads t LEFT JOIN policy_versions v ON v.version = t.policy_version
        WHERE t.thread_id = p_thread;
        known := FOUND;
        IF pinned_state IN ('live', 'candidate') THEN
            policy_version := pinned;
        ELSE
            SELECT coalesce(
                (SELECT c.version FROM policy_versions c
                 WHERE c.state = 'candidate' AND pinned IS NULL
                   AND ('x' || substr(md5(p_thread), 1, 8))::bit(32)::bigint % 100
                       < c.percent),
                (SELECT l.version FROM policy_versions l WHERE l.state = 'live'))
            INTO policy_version;
        END IF;
    END IF;
    -- A new thread is stored with its pin: one row version, not an insert and an update.
    IF NOT known THEN
        INSERT INTO threads (thread_id, user_id, session_id, policy_version)
        VALUES (p_thread, p_user, p_session, cs_begin_run.policy_version)
        ON CONFLICT (thread_id) DO NOTHING;
        known := NOT FOUND;  -- stored meanwhile by another path: pinned below
    END IF;
    IF known AND control = 'agent' AND policy_version IS DISTINCT FROM pinned THEN
        UPDATE threads t SET policy_version = cs_begin_run.policy_version
        WHERE t.thread_id = p_thread;
        IF pinned IS NOT NULL THEN
            INSERT INTO policy_moves (thread_id, from_version, to_version)
            VALUES (p_thread, pinned, cs_begin_run.policy_version);
        END IF;
    END IF;
    INSERT INTO runs (run_id, thread_id, client_message_id, status, owner, policy_version)
    VALUES (p_run, p_thread, p_client_message_id, 'running', p_owner,
            cs_begin_run.policy_version)
    ON CONFLICT (thread_id, client_message_id) DO NOTHING;
    IF FOUND THEN
        status := CASE WHEN control = 'agent' THEN 'started' ELSE 'human' END;
    ELSE
        status := 'duplicate';
        SELECT r.run_id, r.status, r.result INTO earlier_run, earlier_status, earlier_result
        FROM runs r
        WHERE r.thread_id = p_thread AND r.client_message_id = p_client_message_id;
    END IF;
    SELECT c.checkpoint, c.checkpoint_id, c.parent_checkpoint_id, c.metadata,
           c.channel_values, c.pending_writes
    INTO checkpoint, checkpoint_id, parent_checkpoint_id, metadata, channel_values,
         pending_writes
    FROM cs_latest_checkpoint(p_thread) c;
END $$;
