"""Transcript archive: messages summarised out of a thread's working state.

Revision ID: 0004
Revises: 0003
"""

from alembic import op

revision = "0004"
down_revision = "0003"


def upgrade() -> None:
    op.execute("""
    -- A thread's full transcript is archive rows [0, archived_count) followed by the working
    -- messages in its checkpoint. Rows are keyed by position, so a branch made by a rewind
    -- overwrites the abandoned branch's rows from the point where they diverge.
    CREATE TABLE transcript_archive (
        thread_id   text NOT NULL,
        seq         int NOT NULL,
        message     jsonb NOT NULL,
        archived_at timestamptz NOT NULL DEFAULT now(),
        PRIMARY KEY (thread_id, seq)
    );
    """)
