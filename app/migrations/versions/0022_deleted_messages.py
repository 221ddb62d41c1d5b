"""A deleted conversation's client_message_ids are remembered for a while.

Revision ID: 0022
Revises: 0021

Found by the chaos soak: a deleted thread (the client had its 204) came back with its index
row and a run. A replica stalled (SIGSTOP) with the thread's first message in its socket;
the balancer cut the client's connection, the client sent the message again (same
client_message_id) to another replica, got its answer, deleted the thread; then the stalled
replica woke and started the old copy as a new conversation. A delete now keeps the
thread's client_message_ids (`deleted_messages`, pruned with finished runs' logs after
RUN_LOG_TTL_S), and the statement that opens a run refuses one of them on a thread that does
not exist (`409 message_deleted`), under its claim (a delete holds the lease until it
commits), creating nothing and leaving the lease free. A new
conversation under the same id with new message ids is not affected.
"""

from alembic import op

revision = "0022"
down_revision = "0021"


def upgrade() -> None:
    op.execute("""
    CREATE TABLE deleted_messages (
        thread_id         text NOT NULL,
        client_message_id text NOT NULL,
        deleted_at        timestamptz NOT NULL DEFAULT now(),
        PRIMARY KEY (thread_id, client_message_id)
    );
    CREATE INDEX deleted_messages_at ON deleted_messages (deleted_at);

    CREATE OR REPLACE FUNCTION cs_begin_run(
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


def downgrade() -> None:
    op.execute("""
    CREATE OR REPLACE FUNCTION cs_begin_run(
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
    DROP TABLE deleted_messages;
    """)
