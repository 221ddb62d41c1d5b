"""Runs whose process died on a thread nobody claims again: closed by a sweep.

Revision ID: 0021
Revises: 0020

Only a thread's next claim closed a dead process's run as `abandoned`, so a thread its
customer left kept a run `running` and a lease naming it for good (found by the chaos
soak). Every replica now sweeps them (app/runs/poller.py, `RunRepository.abandon_dead`):
a lease expired for longer than a further TTL names no run any more, and its run is
abandoned. The sweep keeps the dead run's id in `dead_run`, so the thread's next claim
still reports it as the stale run it took over and finishes the step that run left (a
write it had begun, app/runs/surgery.py `recovery_inputs`), as it would have without the
sweep. The index serves the sweep: leases naming a run, by expiry.
"""

from alembic import op

revision = "0021"
down_revision = "0020"


def upgrade() -> None:
    op.execute("""
    ALTER TABLE thread_leases ADD COLUMN dead_run text;
    CREATE INDEX thread_leases_held ON thread_leases (expires_at) WHERE run_id IS NOT NULL;

    """)


def downgrade() -> None:
    # 0009's claim, which knows only the lease's own run
    op.execute("""
    DROP INDEX thread_leases_held;
    ALTER TABLE thread_leases DROP COLUMN dead_run;
    """)
