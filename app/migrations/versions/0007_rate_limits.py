"""Rate limits and model-token budgets held across replicas.

Revision ID: 0007
Revises: 0006
"""

from alembic import op

revision = "0007"
down_revision = "0006"


def upgrade() -> None:
    op.execute("""
    -- One row per limited key ("posts:{user}", "public:{ip}", ...): the theoretical arrival
    -- time of the generic cell rate algorithm (GCRA). A request is allowed when, one emission
    -- interval after max(tat, now), tat would still lie within the burst window; one UPSERT
    -- both decides and records (app/api/ratelimit.py). A row whose tat is past means the key
    -- is idle, so rows can be dropped at any time. UNLOGGED: no WAL per request, and a crash
    -- that empties the table only forgives the limits for a moment.
    CREATE UNLOGGED TABLE rate_limits (
        key  text PRIMARY KEY,
        tat  timestamptz NOT NULL
    );

    -- Model tokens of runs whose thread was deleted, so deleting a thread does not give a
    -- customer their daily token budget back (app/db/erase.py). Ids and counts only.
    CREATE TABLE spent_tokens (
        run_id      text PRIMARY KEY,
        user_id     text NOT NULL,
        created_at  timestamptz NOT NULL,
        tokens      bigint NOT NULL
    );
    CREATE INDEX spent_tokens_user_idx ON spent_tokens (user_id, created_at);
    """)
