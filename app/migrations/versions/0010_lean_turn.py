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

revision = "0010"
down_revision = "0009"


def upgrade() -> None:
    op.execute("""
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


    """)
