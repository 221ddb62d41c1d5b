-- The one GCRA (generic cell rate algorithm): a key's theoretical arrival time (tat) moves
-- on by `interval` per request and may run at most `window` ahead of now (the burst). The
-- HTTP limits (app/api/ratelimit.py) and the statement that opens a run (cs_begin_run)
-- both call it. On a refusal, `ahead_s` is how far the key's tat lies ahead of now.
CREATE OR REPLACE FUNCTION cs_gcra(
    p_key text, p_interval_s float8, p_window_s float8,
    OUT allowed boolean, OUT ahead_s float8
) LANGUAGE plpgsql AS $$
DECLARE
    hit int;
BEGIN
    INSERT INTO rate_limits AS r (key, tat)
    VALUES (p_key, now() + p_interval_s * interval '1 second')
    ON CONFLICT (key) DO UPDATE
        SET tat = greatest(r.tat, now()) + p_interval_s * interval '1 second'
        WHERE greatest(r.tat, now()) + p_interval_s * interval '1 second'
              <= now() + p_window_s * interval '1 second';
    GET DIAGNOSTICS hit = ROW_COUNT;
    allowed := hit > 0;
    IF NOT allowed THEN
        SELECT extract(epoch FROM r.tat - now())::float8 INTO ahead_s
        FROM rate_limits r WHERE r.key = p_key;
    END IF;
END $$;
