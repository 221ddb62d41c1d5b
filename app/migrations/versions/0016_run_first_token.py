"""`runs.ttft_ms`: how long a run took to its first token, written by the statement that
closes the run (no extra round trip), so the analytics read time to first token per run
instead of a process-local metric.

Revision ID: 0016
Revises: 0015
"""

from alembic import op

revision = "0016"
down_revision = "0015"


def upgrade() -> None:
    # null: the run streamed no token (a tool-only turn, a failure before the answer)
    op.execute("ALTER TABLE runs ADD COLUMN ttft_ms integer")


def downgrade() -> None:
    op.execute("ALTER TABLE runs DROP COLUMN ttft_ms")
