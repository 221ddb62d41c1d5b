-- Thread leases: one writer per thread, fenced by a generation number.
--
-- A session advisory lock lives and dies with one connection, and a pooler in transaction
-- mode cannot keep one at all. A lease is a row: whoever claims a thread gets the next
-- generation, and every commit of its run (checkpoints, a write) first checks, in the same
-- transaction, that the lease is still its own (cs_fence). A run that lost its claim
-- commits nothing, whatever happened to its connections.
--
-- cs_claim_thread: the new generation, or NULL when a live lease holds the thread. A lease
-- past its expiry belongs to a process that died (or stalled): it is taken over, and the
-- run it held (or the dead run a sweep noted) comes back as stale_run. Claims and releases
-- commit asynchronously: the run's first fenced commit is synchronous and flushes the WAL,
-- claim included; if Postgres crashes before, the same generation may be handed out again,
-- so the fence checks the run id as well.
--
-- cs_fence: first in every transaction that commits a run's work. It locks the lease row
-- until that transaction ends (a claim waits for the commit rather than slipping in before
-- it) and renews the lease when a third of its TTL has gone by.

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

CREATE OR REPLACE FUNCTION cs_release_thread(p_thread text, p_generation bigint)
RETURNS void LANGUAGE plpgsql AS $$
BEGIN
    PERFORM set_config('synchronous_commit', 'off', true);
    UPDATE thread_leases SET run_id = NULL, expires_at = clock_timestamp()
    WHERE thread_id = p_thread AND generation = p_generation;
END $$;

CREATE OR REPLACE FUNCTION cs_fence(p_thread text, p_generation bigint, p_run text, p_ttl_ms int)
RETURNS void LANGUAGE plpgsql AS $$
DECLARE
    until timestamptz;
BEGIN
    SELECT l.expires_at INTO until FROM thread_leases l
    WHERE l.thread_id = p_thread AND l.generation = p_generation AND l.run_id = p_run
    FOR UPDATE;
    IF NOT FOUND THEN
        RAISE EXCEPTION 'the thread lease was lost' USING ERRCODE = 'CSL01';
    END IF;
    -- Renewed only once a third of the TTL has gone by (the heartbeat's pace): a turn's
    -- fences otherwise each rewrote the row, a new row version and its WAL each time.
    -- The lock alone is a few bytes of WAL.
    IF until < clock_timestamp() + make_interval(secs => p_ttl_ms * 2 / 3000.0) THEN
        UPDATE thread_leases l
        SET expires_at = clock_timestamp() + make_interval(secs => p_ttl_ms / 1000.0)
        WHERE l.thread_id = p_thread;
    END IF;
END $$;
