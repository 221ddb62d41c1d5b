"""`runs.lg_options`: what a LangGraph Platform client asked of a run (its stream modes,
whether its events carry ids, the message that opened it), kept with the run.

They lived in the memory of the process that started the run, so a join answered by
another worker or replica fell back to the default modes and lost the opening message.

Revision ID: 0026
Revises: 0025
"""

from alembic import op

revision = "0026"
down_revision = "0025"


def upgrade() -> None:
    # null: a run the native API started (a join gets the Platform's default modes)
    op.execute("ALTER TABLE runs ADD COLUMN lg_options jsonb")


def downgrade() -> None:
    op.execute("ALTER TABLE runs DROP COLUMN lg_options")
