"""Thread leases: one writer per thread, fenced by a generation number.

Revision ID: 0005
Revises: 0004

A session advisory lock lives and dies with one connection, and a pooler in transaction mode
(PgBouncer) cannot keep one at all. A lease is a row: whoever claims a thread gets the next
generation, and every commit of its run (checkpoints, a write) first checks, in the same
transaction, that the generation is still its own (`cs_fence`). A run that lost its claim
therefore commits nothing, whatever happened to its connections.
"""

from alembic import op

revision = "0005"
down_revision = "0004"


def upgrade() -> None:
    op.execute("""
    CREATE INDEX runs_running ON runs (thread_id) WHERE status = 'running';

    CREATE TABLE thread_leases (
        thread_id  text PRIMARY KEY,
        generation bigint NOT NULL,
        owner      text NOT NULL,          -- the process instance that holds it
        run_id     text,                   -- NULL: free
        expires_at timestamptz NOT NULL    -- renewed by the owner's heartbeat and every fence
    );

    -- Claim a thread for run p_run. Returns the new generation, or NULL when a live lease
    -- holds it. A lease past its expiry belongs to a process that died (or stalled): it is
    -- taken over, and the run it held is closed as 'abandoned' (returned as stale_run).
    CREATE FUNCTION cs_claim_thread(
        p_thread text, p_owner text, p_run text, p_ttl_ms int,
        OUT generation bigint, OUT stale_run text
    ) LANGUAGE plpgsql AS $$
    DECLARE
        cur thread_leases%ROWTYPE;
        until timestamptz := clock_timestamp() + make_interval(secs => p_ttl_ms / 1000.0);
    BEGIN
        SELECT * INTO cur FROM thread_leases l WHERE l.thread_id = p_thread FOR UPDATE;
        IF NOT FOUND THEN
            INSERT INTO thread_leases VALUES (p_thread, 1, p_owner, p_run, until)
            ON CONFLICT (thread_id) DO NOTHING;
            IF NOT FOUND THEN
                RETURN;  -- not there and not inserted: a concurrent claim won
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
        -- Holding the claim, no other run of the thread can be alive: one still recorded
        -- as running died (or could not record its end) and is closed as abandoned.
        UPDATE runs SET status = 'abandoned', finished_at = now()
        WHERE thread_id = p_thread AND status = 'running';
    END $$;

    -- The fencing check, first in every transaction that commits a run's work. It locks
    -- the lease row until that transaction ends, so a claim waits for the commit rather
    -- than slipping in before it, and it renews the lease.
    CREATE FUNCTION cs_fence(p_thread text, p_generation bigint, p_ttl_ms int)
    RETURNS void LANGUAGE plpgsql AS $$
    BEGIN
        UPDATE thread_leases l
        SET expires_at = greatest(l.expires_at,
                                  clock_timestamp() + make_interval(secs => p_ttl_ms / 1000.0))
        WHERE l.thread_id = p_thread AND l.generation = p_generation AND l.run_id IS NOT NULL;
        IF NOT FOUND THEN
            RAISE EXCEPTION 'the thread lease was lost' USING ERRCODE = 'CSL01';
        END IF;
    END $$;
    """)
