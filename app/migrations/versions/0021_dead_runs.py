"""Runs whose process died on a thread nobody claims again: closed by a sweep.

Revision ID: 0021
Revises: 0020

Only a thread's next claim closed a dead process's run as `abandoned`, so a thread its
customer left kept a run `running` and a lease naming it for good (found by the chaos
soak). Every replica now sweeps them (app/runs/poller.py, `RunRepository.abandon_dead`):
a lease expired for longer than a further TTL names no run any more, and its run is
abandoned. The sweep keeps the dead run's id in `dead_run`, so the thread's next claim
still reports it as the stale run it took over and finishes the step that run left (a
write it had begun, app/agent/edits.py `recovery_inputs`), as it would have without the
sweep. The index serves the sweep: leases naming a run, by expiry.
"""

from alembic import op

revision = "0021"
down_revision = "0020"


def upgrade() -> None:
    op.execute("""
    ALTER TABLE thread_leases ADD COLUMN dead_run text;
    CREATE INDEX thread_leases_held ON thread_leases (expires_at) WHERE run_id IS NOT NULL;

    CREATE OR REPLACE FUNCTION cs_claim_thread(
        p_thread text, p_owner text, p_run text, p_ttl_ms int,
        OUT generation bigint, OUT stale_run text
    ) LANGUAGE plpgsql AS $$
    DECLARE
        cur thread_leases%ROWTYPE;
        until timestamptz := clock_timestamp() + make_interval(secs => p_ttl_ms / 1000.0);
    BEGIN
        PERFORM set_config('synchronous_commit', 'off', true);
        SELECT * INTO cur FROM thread_leases l WHERE l.thread_id = p_thread FOR UPDATE;
        IF NOT FOUND THEN
            INSERT INTO thread_leases (thread_id, generation, owner, run_id, expires_at)
            VALUES (p_thread, 1, p_owner, p_run, until)
            ON CONFLICT (thread_id) DO NOTHING;
            IF NOT FOUND THEN
                RETURN;  -- not there and not inserted: a concurrent claim won
            END IF;
            generation := 1;
        ELSE
            IF cur.run_id IS NOT NULL AND cur.expires_at > clock_timestamp() THEN
                RETURN;
            END IF;
            stale_run := coalesce(cur.run_id, cur.dead_run);
            generation := cur.generation + 1;
            UPDATE thread_leases l
            SET generation = cs_claim_thread.generation, owner = p_owner, run_id = p_run,
                expires_at = until, dead_run = NULL
            WHERE l.thread_id = p_thread;
        END IF;
        UPDATE runs SET status = 'abandoned', finished_at = now()
        WHERE thread_id = p_thread AND status = 'running';
    END $$;
    """)


def downgrade() -> None:
    # 0009's claim, which knows only the lease's own run
    op.execute("""
    CREATE OR REPLACE FUNCTION cs_claim_thread(
        p_thread text, p_owner text, p_run text, p_ttl_ms int,
        OUT generation bigint, OUT stale_run text
    ) LANGUAGE plpgsql AS $$
    DECLARE
        cur thread_leases%ROWTYPE;
        until timestamptz := clock_timestamp() + make_interval(secs => p_ttl_ms / 1000.0);
    BEGIN
        PERFORM set_config('synchronous_commit', 'off', true);
        SELECT * INTO cur FROM thread_leases l WHERE l.thread_id = p_thread FOR UPDATE;
        IF NOT FOUND THEN
            INSERT INTO thread_leases (thread_id, generation, owner, run_id, expires_at)
            VALUES (p_thread, 1, p_owner, p_run, until)
            ON CONFLICT (thread_id) DO NOTHING;
            IF NOT FOUND THEN
                RETURN;
            END IF;
            generation := 1;
        ELSE
            IF cur.run_id IS NOT NULL AND cur.expires_at > clock_timestamp() THEN
                RETURN;
            END IF;
            stale_run := cur.run_id;
            generation := cur.generation + 1;
            UPDATE thread_leases l
            SET generation = cs_claim_thread.generation, owner = p_owner, run_id = p_run,
                expires_at = until
            WHERE l.thread_id = p_thread;
        END IF;
        UPDATE runs SET status = 'abandoned', finished_at = now()
        WHERE thread_id = p_thread AND status = 'running';
    END $$;
    DROP INDEX thread_leases_held;
    ALTER TABLE thread_leases DROP COLUMN dead_run;
    """)
