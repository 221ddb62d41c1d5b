"""Leases without a flush per claim: claims and releases commit asynchronously; the fence
checks the run as well as the generation.

Revision ID: 0009
Revises: 0008

A claim and a release are two commits a turn, and each waited for its WAL flush (about
1.5 ms each here), more than the rest of what one writer per thread costs. They commit
asynchronously now. That is safe because nothing depends on a claim being durable before
the run's first fenced commit, which is synchronous and so flushes the WAL before it, claim
included. If Postgres crashes before then, the claim may be lost and the same generation
handed to another run: the fence therefore also checks the run id, so two runs can never
both pass it.
"""

from alembic import op

revision = "0009"
down_revision = "0008"


def upgrade() -> None:
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
        UPDATE runs SET status = 'abandoned', finished_at = now()
        WHERE thread_id = p_thread AND status = 'running';
    END $$;

    CREATE FUNCTION cs_release_thread(p_thread text, p_generation bigint)
    RETURNS void LANGUAGE plpgsql AS $$
    BEGIN
        PERFORM set_config('synchronous_commit', 'off', true);
        UPDATE thread_leases SET run_id = NULL, expires_at = clock_timestamp()
        WHERE thread_id = p_thread AND generation = p_generation;
    END $$;

    CREATE FUNCTION cs_fence(p_thread text, p_generation bigint, p_run text, p_ttl_ms int)
    RETURNS void LANGUAGE plpgsql AS $$
    BEGIN
        UPDATE thread_leases l
        SET expires_at = greatest(l.expires_at,
                                  clock_timestamp() + make_interval(secs => p_ttl_ms / 1000.0))
        WHERE l.thread_id = p_thread AND l.generation = p_generation AND l.run_id = p_run;
        IF NOT FOUND THEN
            RAISE EXCEPTION 'the thread lease was lost' USING ERRCODE = 'CSL01';
        END IF;
    END $$;
    DROP FUNCTION cs_fence(text, bigint, int);
    """)
