"""Who answers a thread: the agent, nobody yet (queued after a handoff), or a named person.

Revision ID: 0011
Revises: 0010

The control state lives on the thread's lease row: the claim of every run already locks
that row (`cs_claim_thread`), so a turn learns who answers at no extra round trip, and a
change of control serialises with the claim. Every change increments `control_version` and
is compare-and-set on it (`cs_control`), so of two people accepting one thread exactly one
wins; each change is kept in `control_history`. `thread_events` is the thread's own stream
(messages of all authors, control changes, runs), read by id from any replica.
"""

from alembic import op

revision = "0011"
down_revision = "0010"


def upgrade() -> None:
    op.execute("""
    ALTER TABLE thread_leases
        ADD COLUMN control text NOT NULL DEFAULT 'agent',  -- agent | queued | human
        ADD COLUMN control_version bigint NOT NULL DEFAULT 0,
        ADD COLUMN assignee text,            -- the staff subject holding it (human)
        ADD COLUMN assignee_name text,
        ADD COLUMN control_summary text,     -- the agent's summary at the handoff
        ADD COLUMN control_reason text,
        ADD COLUMN control_since timestamptz;
    CREATE INDEX thread_leases_control ON thread_leases (control, control_since)
        WHERE control <> 'agent';

    CREATE TABLE control_history (
        id         bigserial PRIMARY KEY,
        thread_id  text NOT NULL,
        version    bigint NOT NULL,
        action     text NOT NULL,   -- handoff | accept | take_over | transfer | release
        actor      text NOT NULL,
        control    text NOT NULL,
        assignee   text,
        note       text,
        at         timestamptz NOT NULL DEFAULT now()
    );
    CREATE INDEX control_history_thread ON control_history (thread_id, id);

    CREATE TABLE thread_events (
        id         bigserial PRIMARY KEY,
        thread_id  text NOT NULL,
        kind       text NOT NULL,   -- message | control | run | done
        data       jsonb NOT NULL,
        created_at timestamptz NOT NULL DEFAULT now()
    );
    CREATE INDEX thread_events_thread ON thread_events (thread_id, id);

    -- One change of control, compare-and-set on the version. Returns the new row, or
    -- nothing when the version is stale or the action is not allowed from the state.
    CREATE FUNCTION cs_control(
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

    -- A deleted thread (DELETE /threads, erase, retention) takes its stream and its control
    -- history with it (they hold what people wrote), and a new conversation under the same
    -- id starts with the agent: the lease row itself stays (it keeps the generation).
    CREATE FUNCTION cs_forget_thread_control() RETURNS trigger LANGUAGE plpgsql AS $$
    BEGIN
        DELETE FROM thread_events WHERE thread_id = OLD.thread_id;
        DELETE FROM control_history WHERE thread_id = OLD.thread_id;
        UPDATE thread_leases SET control = 'agent', control_version = control_version + 1,
               assignee = NULL, assignee_name = NULL, control_summary = NULL,
               control_reason = NULL, control_since = NULL
        WHERE thread_id = OLD.thread_id AND control <> 'agent';
        RETURN OLD;
    END $$;
    CREATE TRIGGER threads_forget_control AFTER DELETE ON threads
        FOR EACH ROW EXECUTE FUNCTION cs_forget_thread_control();

    -- cs_begin_run of 0010, and who answers the thread (`control`, read under the claim).
    DROP FUNCTION cs_begin_run(text, text, text, text, text, int, text, text, float8, float8,
                               bigint);
    CREATE FUNCTION cs_begin_run(
        p_thread text, p_user text, p_session text, p_owner text, p_run text, p_ttl_ms int,
        p_client_message_id text, p_rate_key text, p_interval_s float8, p_window_s float8,
        p_budget bigint,
        OUT status text, OUT generation bigint, OUT stale_run text, OUT busy_for_s float8,
        OUT ahead_s float8, OUT day_left_s float8,
        OUT earlier_run text, OUT earlier_status text, OUT earlier_result jsonb,
        OUT checkpoint jsonb, OUT checkpoint_id text, OUT parent_checkpoint_id text,
        OUT metadata jsonb, OUT channel_values bytea[], OUT pending_writes bytea[],
        OUT control text
    ) LANGUAGE plpgsql AS $$
    DECLARE
        hit int;
        spent bigint;
    BEGIN
        IF p_rate_key IS NOT NULL THEN
            INSERT INTO rate_limits AS r (key, tat)
            VALUES (p_rate_key, now() + p_interval_s * interval '1 second')
            ON CONFLICT (key) DO UPDATE
                SET tat = greatest(r.tat, now()) + p_interval_s * interval '1 second'
                WHERE greatest(r.tat, now()) + p_interval_s * interval '1 second'
                      <= now() + p_window_s * interval '1 second';
            GET DIAGNOSTICS hit = ROW_COUNT;
            IF hit = 0 THEN
                status := 'rate_limited';
                SELECT extract(epoch FROM r.tat - now())::float8 INTO ahead_s
                FROM rate_limits r WHERE r.key = p_rate_key;
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
        -- the claim locked the lease row: who answers cannot change until this commits
        SELECT l.control INTO control FROM thread_leases l WHERE l.thread_id = p_thread;
        INSERT INTO threads (thread_id, user_id, session_id)
        VALUES (p_thread, p_user, p_session) ON CONFLICT (thread_id) DO NOTHING;
        INSERT INTO runs (run_id, thread_id, client_message_id, status, owner)
        VALUES (p_run, p_thread, p_client_message_id, 'running', p_owner)
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
    """)
