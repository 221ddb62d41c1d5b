"""Rate limits and model-token budgets held across replicas.

Revision ID: 0007
Revises: 0006
"""

from alembic import op

revision = "0007"
down_revision = "0006"


def upgrade() -> None:
    op.execute("SELECT 1")
