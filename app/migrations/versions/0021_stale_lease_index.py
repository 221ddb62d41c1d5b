"""An index for the sweep that closes runs whose process died on a thread nobody comes back
to (app/runs/poller.py): leases still naming a run, by expiry. Without it, only the thread's
next claim closed such a run, so a thread its customer left kept a run `running` and a lease
held by no process for good (found by the chaos soak).

Revision ID: 0021
Revises: 0020
"""

from alembic import op

revision = "0021"
down_revision = "0020"


def upgrade() -> None:
    op.execute(
        "CREATE INDEX thread_leases_held ON thread_leases (expires_at) WHERE run_id IS NOT NULL"
    )


def downgrade() -> None:
    op.execute("DROP INDEX thread_leases_held")
