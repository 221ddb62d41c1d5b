"""Thread leases: one writer per thread, fenced by a generation number.

Revision ID: 0005
Revises: 0004

A session advisory lock lives and dies with one connection, and a pooler in transaction mode
(PgBouncer) cannot keep one at all. A lease is a row: whoever claims a thread gets the next
generation, and every commit of its run (checkpoints, a write) first checks, in the same
transaction, that the generation is still its own (`cs_fence`). A run that lost its claim
therefore commits nothing, whatever happened to its connections.
"""

from alembic import op

revision = "0005"
down_revision = "0004"


def upgrade() -> None:
    op.execute("""
    CREATE INDEX runs_running ON runs (thread_id) WHERE status = 'running';

    CREATE TABLE thread_leases (
        thread_id  text PRIMARY KEY,
        generation bigint NOT NULL,
        owner      text NOT NULL,          -- the process instance that holds it
        run_id     text,                   -- NULL: free
        expires_at timestamptz NOT NULL    -- renewed by the owner's heartbeat and every fence
    );


    """)
