"""Thread index and run records for the HTTP API.

Revision ID: 0002
Revises: 0001
"""

from alembic import op

revision = "0002"
down_revision = "0001"


def upgrade() -> None:
    op.execute("""
    -- The checkpointer is the truth for a conversation; this table only indexes threads per
    -- owner so listing does not scan checkpoints.
    CREATE TABLE threads (
        thread_id      text PRIMARY KEY,      -- "{user_id}:{session_id}"
        user_id        text NOT NULL,
        session_id     text NOT NULL,
        title          text NOT NULL DEFAULT '',
        message_count  int NOT NULL DEFAULT 0,
        created_at     timestamptz NOT NULL DEFAULT now(),
        updated_at     timestamptz NOT NULL DEFAULT now(),
        UNIQUE (user_id, session_id)
    );
    CREATE INDEX threads_user_activity_idx ON threads (user_id, updated_at DESC, session_id);

    CREATE TABLE runs (
        run_id             text PRIMARY KEY,
        thread_id          text NOT NULL,
        client_message_id  text,
        status             text NOT NULL,   -- running | completed | interrupted | failed
        result             jsonb,
        created_at         timestamptz NOT NULL DEFAULT now(),
        finished_at        timestamptz,
        UNIQUE (thread_id, client_message_id)
    );
    CREATE INDEX runs_thread_idx ON runs (thread_id);
    """)
