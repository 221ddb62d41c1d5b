"""Drop `thread_leases_held` and leave a fifth of each new page of `thread_leases` free, so
a lease's claim, renewal and release update it in place (a HOT update: no index entries).

The index (expires_at WHERE run_id IS NOT NULL) served one query, the sweep of dead runs,
and cost every turn a new row version in every index of the table twice: the claim and
the release each change `run_id`, a column of its predicate. The sweep now starts from
the running runs (`runs_running`, a few rows) and reads their leases by primary key.

Revision ID: 0028
Revises: 0027
"""

from alembic import op

revision = "0028"
down_revision = "0027"


def upgrade() -> None:
    op.execute("DROP INDEX IF EXISTS thread_leases_held")
    op.execute("ALTER TABLE thread_leases SET (fillfactor = 80)")


def downgrade() -> None:
    op.execute("ALTER TABLE thread_leases RESET (fillfactor)")
    op.execute(
        "CREATE INDEX IF NOT EXISTS thread_leases_held ON thread_leases (expires_at)"
        " WHERE run_id IS NOT NULL"
    )
