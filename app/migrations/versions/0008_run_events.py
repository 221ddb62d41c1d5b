"""Runs you can come back to: owner, cancel and tail requests, and the event log.

Revision ID: 0008
Revises: 0007

A run's events live in its process while it runs. They reach Postgres when another reader
may need them: all at once with the run's outcome (`runs.events`, kept for RUN_LOG_TTL_S),
and, while it runs, in chunks (`run_event_chunks`) once its own client went away or another
replica asked to follow it (`tail_requested`). A cancel sent to any replica is a flag the
owner polls for.
"""

from alembic import op

revision = "0008"
down_revision = "0007"


def upgrade() -> None:
    op.execute("""
    ALTER TABLE runs
        ADD COLUMN owner text,
        ADD COLUMN cancel_requested boolean NOT NULL DEFAULT false,
        ADD COLUMN tail_requested boolean NOT NULL DEFAULT false,
        ADD COLUMN events jsonb; -- [[seq, event, data], ...] without `done` (rebuilt from the row)
    CREATE INDEX runs_requests ON runs (run_id) WHERE cancel_requested OR tail_requested;
    CREATE INDEX runs_logs_kept ON runs (finished_at) WHERE events IS NOT NULL;
    CREATE INDEX runs_thread_created ON runs (thread_id, created_at DESC);

    CREATE TABLE run_event_chunks (
        run_id     text NOT NULL,
        first_seq  int NOT NULL,
        last_seq   int NOT NULL,
        events     jsonb NOT NULL,
        PRIMARY KEY (run_id, first_seq)
    );
    """)
