"""One outcome per conversation, for operator analytics (issue 29).

Revision ID: 0015
Revises: 0014

Written by the outcome sweep (app/analytics/sweep.py) once a thread is idle or handed off,
upserted by thread id, so a sweep run twice (or on two replicas) leaves one row. A row holds
no message text: counts, per-tool counts, flags (a code and a sentence the sweep wrote) and
ids, so it may outlive the thread it describes. `activity_at` is the thread's last activity
when the row was computed: a thread with newer activity is computed again.
"""

from alembic import op

revision = "0015"
down_revision = "0014"


def upgrade() -> None:
    op.execute("""
    CREATE TABLE conversation_outcomes (
        thread_id              text PRIMARY KEY,
        user_id                text,
        result                 text NOT NULL,  -- resolved | handed_off | abandoned | failed
        handoff_reason         text,
        turns                  int NOT NULL,
        duration_s             float8 NOT NULL,
        ttft_p50_ms            float8,          -- null: not recorded
        tool_calls             int NOT NULL,
        tool_errors            int NOT NULL,
        tool_calls_by_tool     jsonb NOT NULL,  -- {tool: n}
        tool_errors_by_tool    jsonb NOT NULL,
        breaker_trips          int NOT NULL,
        confirmations_asked    int NOT NULL,
        confirmations_approved int NOT NULL,
        confirmations_declined int NOT NULL,
        writes_by_tool         jsonb NOT NULL,
        model_calls            int NOT NULL,
        tokens_in              bigint NOT NULL,
        tokens_out             bigint NOT NULL,
        cost_usd               numeric(14, 6) NOT NULL,
        flags                  jsonb NOT NULL,  -- [{code, reason}]
        score                  int,             -- the model judge's (not built yet)
        score_reasons          jsonb,
        started_at             timestamptz NOT NULL,
        ended_at               timestamptz NOT NULL,
        activity_at            timestamptz NOT NULL,
        computed_at            timestamptz NOT NULL DEFAULT now(),
        CHECK (result IN ('resolved', 'handed_off', 'abandoned', 'failed'))
    );
    CREATE INDEX conversation_outcomes_started ON conversation_outcomes (started_at);
    CREATE INDEX conversation_outcomes_ended ON conversation_outcomes (ended_at DESC, thread_id);
    CREATE INDEX conversation_outcomes_user ON conversation_outcomes (user_id);
    CREATE INDEX conversation_outcomes_flags ON conversation_outcomes USING gin (flags);
    """)


def downgrade() -> None:
    op.execute("DROP TABLE conversation_outcomes")
