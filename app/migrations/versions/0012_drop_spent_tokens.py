"""`spent_tokens` goes: the day's tokens are the `token_usage` counter (0010), which a
thread's delete never touches, so nothing needs keeping when a thread is deleted.

Revision ID: 0012
Revises: 0011
"""

from alembic import op

revision = "0012"
down_revision = "0011"


def upgrade() -> None:
    op.execute("DROP TABLE spent_tokens")
