"""The claims of a thread that are not a run's (a staff message, a rewind): noted, so the
dead-run sweep finds their lease when the process holding it dies.

Revision ID: 0029
Revises: 0028

Migration 0028 dropped the index over every held lease and made the sweep start from the
running runs. A staff action or a rewind claims a thread under an id of its own
(`staff-<uuid>`, `rewind-<uuid>`: app/runs/leases.py `ThreadLeases.claim`), with no run
row, so a process killed while it held one left the lease naming it after it expired
(the chaos soak's `lease_held_by_no_process`). Such a claim now also notes itself here, in
the statement that claims, and the sweep reads this table (a few rows: it drops the notes
whose lease has moved on). A run's claim notes nothing, so a turn pays nothing.
"""

from alembic import op

revision = "0029"
down_revision = "0028"


def upgrade() -> None:
    op.execute("""
    CREATE TABLE held_claims (
        thread_id text NOT NULL,
        run_id text NOT NULL,
        PRIMARY KEY (thread_id, run_id)
    );
    """)


def downgrade() -> None:
    op.execute("DROP TABLE held_claims")
