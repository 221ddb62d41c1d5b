"""Drop `runs_thread_idx`: `runs_thread_created` (thread_id, created_at DESC) answers every
look-up by thread the plain index did, and each index costs every run two entries (its
insert, and its close: a new row version, as `status` is in `runs_running`'s predicate).

Revision ID: 0027
Revises: 0026
"""

from alembic import op

revision = "0027"
down_revision = "0026"


def upgrade() -> None:
    op.execute("DROP INDEX IF EXISTS runs_thread_idx")


def downgrade() -> None:
    op.execute("CREATE INDEX IF NOT EXISTS runs_thread_idx ON runs (thread_id)")
