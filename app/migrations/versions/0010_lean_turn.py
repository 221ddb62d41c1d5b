"""A lean turn: one statement opens a run, one closes it; a token counter; logs in one table.

Revision ID: 0010
Revises: 0009

`cs_begin_run` does in one round trip what took three before the graph started (the post
rate and the day's token budget, the lease claim, the run's record) and reads the checkpoint
the run starts from, so the checkpointer does not read it again (app/db/checkpointer.py).
The checkpoint is read by `cs_latest_checkpoint`, a VOLATILE function: it takes its own
snapshot after the claim, so it sees every commit of the run the claim waited for (a
lateral join in the calling statement would read the statement's older snapshot and could
start a run from a checkpoint that is no longer the newest: a fork). Its query is
upstream's own (`SELECT_SQL` of langgraph-checkpoint-postgres), so the row it returns loads
as upstream's does; a test compares the two.

The day's model tokens of each user are a counter (`token_usage`) that the closing
statement adds to, not a sum over stored results; deleting a thread no longer touches it.

A run's event log lives only in `run_event_chunks`: the closing statement stores what was
not shipped yet as the last chunk, and old logs go with a DELETE of chunks, never a
rewrite of the run row.
"""

from alembic import op
from langgraph.checkpoint.postgres.base import SELECT_SQL

revision = "0010"
down_revision = "0009"


def upgrade() -> None:
    op.execute(f"""
    CREATE TABLE token_usage (
        user_id  text NOT NULL,
        day      date NOT NULL,
        tokens   bigint NOT NULL DEFAULT 0,
        PRIMARY KEY (user_id, day)
    );
    INSERT INTO token_usage (user_id, day, tokens)
    SELECT user_id, (now() AT TIME ZONE 'UTC')::date, sum(tokens) FROM (
        SELECT t.user_id,
               coalesce((r.result->'usage'->>'input_tokens')::bigint, 0)
               + coalesce((r.result->'usage'->>'output_tokens')::bigint, 0) AS tokens
        FROM runs r JOIN threads t ON t.thread_id = r.thread_id
        WHERE r.created_at >= date_trunc('day', now(), 'UTC')
        UNION ALL
        SELECT s.user_id, s.tokens FROM spent_tokens s
        WHERE s.created_at >= date_trunc('day', now(), 'UTC')
          AND NOT EXISTS (SELECT 1 FROM runs r WHERE r.run_id = s.run_id)
    ) today GROUP BY user_id;

    ALTER TABLE run_event_chunks ADD COLUMN created_at timestamptz NOT NULL DEFAULT now();
    CREATE INDEX run_event_chunks_created ON run_event_chunks (created_at);
    INSERT INTO run_event_chunks (run_id, first_seq, last_seq, events, created_at)
    SELECT run_id, (events->0->>0)::int, (events->-1->>0)::int, events, finished_at
    FROM runs WHERE events IS NOT NULL AND jsonb_array_length(events) > 0
    ON CONFLICT DO NOTHING;
    ALTER TABLE runs DROP COLUMN events;

    CREATE FUNCTION cs_latest_checkpoint(p_thread text)
    RETURNS TABLE (
        thread_id text, checkpoint jsonb, checkpoint_ns text, checkpoint_id text,
        parent_checkpoint_id text, metadata jsonb, channel_values bytea[],
        pending_writes bytea[]
    ) LANGUAGE plpgsql VOLATILE AS $$
    #variable_conflict use_column
    BEGIN
        RETURN QUERY {SELECT_SQL}
        WHERE checkpoints.thread_id = p_thread AND checkpoints.checkpoint_ns = ''
        ORDER BY checkpoints.checkpoint_id DESC LIMIT 1;
    END $$;

    -- status: started | duplicate (this client_message_id has a run: earlier_*) | busy
    -- (busy_for_s: until the lease expires) | rate_limited (ahead_s) | budget_exhausted
    -- (day_left_s). Only 'started' and 'duplicate' hold the claim (generation).
    CREATE FUNCTION cs_begin_run(
        p_thread text, p_user text, p_session text, p_owner text, p_run text, p_ttl_ms int,
        p_client_message_id text, p_rate_key text, p_interval_s float8, p_window_s float8,
        p_budget bigint,
        OUT status text, OUT generation bigint, OUT stale_run text, OUT busy_for_s float8,
        OUT ahead_s float8, OUT day_left_s float8,
        OUT earlier_run text, OUT earlier_status text, OUT earlier_result jsonb,
        OUT checkpoint jsonb, OUT checkpoint_id text, OUT parent_checkpoint_id text,
        OUT metadata jsonb, OUT channel_values bytea[], OUT pending_writes bytea[]
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
        INSERT INTO threads (thread_id, user_id, session_id)
        VALUES (p_thread, p_user, p_session) ON CONFLICT (thread_id) DO NOTHING;
        INSERT INTO runs (run_id, thread_id, client_message_id, status, owner)
        VALUES (p_run, p_thread, p_client_message_id, 'running', p_owner)
        ON CONFLICT (thread_id, client_message_id) DO NOTHING;
        IF FOUND THEN
            status := 'started';
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
