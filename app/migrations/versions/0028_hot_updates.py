"""A turn's updates of its lease and its thread in place (HOT updates: no new index entries,
the dead version pruned on its page instead of left to vacuum's index scans).

- `thread_leases_held` (expires_at WHERE run_id IS NOT NULL) is dropped. It served one
  query, the sweep of dead runs, and made a new row version in every index of the table
  twice a turn: the claim and the release each change `run_id`, a column of its predicate.
  The sweep now starts from the running runs (`runs_running`, a few rows) and reads their
  leases by primary key.
- `threads_user_activity_idx` (user_id, updated_at DESC, session_id) is dropped: every
  run's close moves `updated_at`, so every close was a new row version in the table's four
  indexes (the metadata GIN among them). A customer's threads are listed newest first
  from `threads_user_id_session_id_key` (user_id, session_id), then sorted: a customer has
  tens of threads, not thousands.
- Both tables leave a fifth of each new page free, so the update of a row inserted a
  moment before (a new thread's lease and thread, closed when the turn ends) finds room
  on its page.

Revision ID: 0028
Revises: 0027
"""

from alembic import op

revision = "0028"
down_revision = "0027"


def upgrade() -> None:
    op.execute("DROP INDEX IF EXISTS thread_leases_held")
    op.execute("DROP INDEX IF EXISTS threads_user_activity_idx")
    op.execute("ALTER TABLE thread_leases SET (fillfactor = 80)")
    op.execute("ALTER TABLE threads SET (fillfactor = 80)")


def downgrade() -> None:
    op.execute("ALTER TABLE threads RESET (fillfactor)")
    op.execute("ALTER TABLE thread_leases RESET (fillfactor)")
    op.execute(
        "CREATE INDEX IF NOT EXISTS threads_user_activity_idx"
        " ON threads (user_id, updated_at DESC, session_id)"
    )
    op.execute(
        "CREATE INDEX IF NOT EXISTS thread_leases_held ON thread_leases (expires_at)"
        " WHERE run_id IS NOT NULL"
    )
