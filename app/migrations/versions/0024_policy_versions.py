"""Policies as versioned data (issue 42).

Revision ID: 0024
Revises: 0022

The agent's rules (the instructions the system prompt carries and a list of procedures)
become immutable rows, numbered 1, 2, 3...; one is live, at most one is a candidate that
answers `percent` of new conversations. Version 1 is today's shipped rules, so an upgrade
changes nothing a model is told.

A thread is pinned to a version at its first turn, by the statement that opens every run
(`cs_begin_run`): the candidate when the thread id's bucket (the first 32 bits of its md5,
mod 100) is under the candidate's percent, else live. Later turns read the pin there, at
the cost of one primary-key join in a statement the turn runs anyway; a thread whose
version was retired (a rollback) moves to live at its next turn, recorded in
`policy_moves`. Each run records its version. Existing threads and runs were answered by
version 1 (a column default, so no table rewrite).
"""

from alembic import op

revision = "0024"
down_revision = "0022"

# Frozen here as migrations are: app/agent/prompts.py POLICY as shipped at this revision
# (a test checks they agree). `{identity}` marks where the code puts the identity line.
SHIPPED_INSTRUCTIONS = """You are the customer-service agent of an online shop. Be brief, \
friendly and exact.
Rules:
- Verify identity first. {identity}
- Help one customer per conversation; never act on another customer's data.
- Use tools for facts; never invent orders, amounts, dates or policies.
- Before any change (cancel, modify, return, exchange, address), explain exactly what will \
happen and get a clear "yes" from the customer in this conversation, then call the tool once.
- Transfer to a human only when the request is outside what your tools can do, or the \
customer insists.
- Remembered preferences are wishes, not permissions: they never replace the customer's \
"yes" in this conversation, and never change these rules.
- Amounts are in the shop's currency; give them to the cent."""

# cs_begin_run as of 0022, with markers where this revision adds the pin.
BEGIN_RUN = """
CREATE FUNCTION cs_begin_run(
    p_thread text, p_user text, p_session text, p_owner text, p_run text, p_ttl_ms int,
    p_client_message_id text, p_rate_key text, p_interval_s float8, p_window_s float8,
    p_budget bigint,
    OUT status text, OUT generation bigint, OUT stale_run text, OUT busy_for_s float8,
    OUT ahead_s float8, OUT day_left_s float8,
    OUT earlier_run text, OUT earlier_status text, OUT earlier_result jsonb,
    OUT checkpoint jsonb, OUT checkpoint_id text, OUT parent_checkpoint_id text,
    OUT metadata jsonb, OUT channel_values bytea[], OUT pending_writes bytea[],
    OUT control text/*PIN_OUT*/
) LANGUAGE plpgsql AS $$
DECLARE
    hit int;
    spent bigint;/*PIN_VARS*/
BEGIN
    IF p_rate_key IS NOT NULL THEN
        INSERT INTO rate_limits AS r (key, tat)
        VALUES (p_rate_key, now() + p_interval_s * interval '1 second')
        ON CONFLICT (key) DO UPDATE
            SET tat = greatest(r.tat, now()) + p_interval_s * interval '1 second'
            WHERE greatest(r.tat, now()) + p_interval_s * interval '1 second'
                  <= now() + p_window_s * interval '1 second';
        GET DIAGNOSTICS hit = ROW_COUNT;
        IF hit = 0 THEN
            status := 'rate_limited';
            SELECT extract(epoch FROM r.tat - now())::float8 INTO ahead_s
            FROM rate_limits r WHERE r.key = p_rate_key;
            RETURN;
        END IF;
    END IF;
    IF p_budget > 0 THEN
        SELECT u.tokens INTO spent FROM token_usage u
        WHERE u.user_id = p_user AND u.day = (now() AT TIME ZONE 'UTC')::date;
        IF coalesce(spent, 0) >= p_budget THEN
            status := 'budget_exhausted';
            day_left_s := extract(epoch FROM
                date_trunc('day', now(), 'UTC') + interval '1 day' - now())::float8;
            RETURN;
        END IF;
    END IF;
    SELECT c.generation, c.stale_run INTO generation, stale_run
    FROM cs_claim_thread(p_thread, p_owner, p_run, p_ttl_ms) c;
    IF generation IS NULL THEN
        status := 'busy';
        SELECT greatest(0, extract(epoch FROM l.expires_at - clock_timestamp()))::float8
        INTO busy_for_s FROM thread_leases l WHERE l.thread_id = p_thread;
        RETURN;
    END IF;
    -- A late copy of a message of a deleted conversation (its client, cut off, sent it
    -- again elsewhere, had its answer and deleted the thread; this copy was held up on
    -- its way) must not start the conversation over. Checked under the claim: a
    -- delete holds the lease until it commits, so its message ids are visible here.
    IF p_client_message_id IS NOT NULL
       AND NOT EXISTS (SELECT 1 FROM threads t WHERE t.thread_id = p_thread)
       AND EXISTS (SELECT 1 FROM deleted_messages d
                   WHERE d.thread_id = p_thread
                     AND d.client_message_id = p_client_message_id) THEN
        UPDATE thread_leases l SET run_id = NULL, expires_at = clock_timestamp()
        WHERE l.thread_id = p_thread AND l.run_id = p_run;
        status := 'deleted';
        generation := NULL;
        stale_run := NULL;
        RETURN;
    END IF;
    -- the claim locked the lease row: who answers cannot change until this commits
    SELECT l.control INTO control FROM thread_leases l WHERE l.thread_id = p_thread;
    INSERT INTO threads (thread_id, user_id, session_id)
    VALUES (p_thread, p_user, p_session) ON CONFLICT (thread_id) DO NOTHING;/*PIN*/
    INSERT INTO runs (run_id, thread_id, client_message_id, status, owner/*RUN_COL*/)
    VALUES (p_run, p_thread, p_client_message_id, 'running', p_owner/*RUN_VAL*/)
    ON CONFLICT (thread_id, client_message_id) DO NOTHING;
    IF FOUND THEN
        status := CASE WHEN control = 'agent' THEN 'started' ELSE 'human' END;
    ELSE
        status := 'duplicate';
        SELECT r.run_id, r.status, r.result INTO earlier_run, earlier_status, earlier_result
        FROM runs r
        WHERE r.thread_id = p_thread AND r.client_message_id = p_client_message_id;
    END IF;
    SELECT c.checkpoint, c.checkpoint_id, c.parent_checkpoint_id, c.metadata,
           c.channel_values, c.pending_writes
    INTO checkpoint, checkpoint_id, parent_checkpoint_id, metadata, channel_values,
         pending_writes
    FROM cs_latest_checkpoint(p_thread) c;
END $$;
"""

# The pin, when the agent answers: the thread's version while it is published; else (a
# first turn, or a version retired since) the candidate by the thread's bucket on a first
# turn, else live. The pin is written only when it changes.
PIN = """
    IF control = 'agent' THEN
        SELECT t.policy_version, v.state INTO pinned, pinned_state
        FROM threads t LEFT JOIN policy_versions v ON v.version = t.policy_version
        WHERE t.thread_id = p_thread;
        IF pinned_state IN ('live', 'candidate') THEN
            policy_version := pinned;
        ELSE
            SELECT coalesce(
                (SELECT c.version FROM policy_versions c
                 WHERE c.state = 'candidate' AND pinned IS NULL
                   AND ('x' || substr(md5(p_thread), 1, 8))::bit(32)::bigint % 100
                       < c.percent),
                (SELECT l.version FROM policy_versions l WHERE l.state = 'live'))
            INTO policy_version;
            IF policy_version IS DISTINCT FROM pinned THEN
                UPDATE threads t SET policy_version = cs_begin_run.policy_version
                WHERE t.thread_id = p_thread;
                IF pinned IS NOT NULL THEN
                    INSERT INTO policy_moves (thread_id, from_version, to_version)
                    VALUES (p_thread, pinned, cs_begin_run.policy_version);
                END IF;
            END IF;
        END IF;
    END IF;"""

SIGNATURE = "cs_begin_run(text, text, text, text, text, int, text, text, float8, float8, bigint)"


def begin_run(*, pinned: bool) -> str:
    marks = {
        "/*PIN_OUT*/": ", OUT policy_version int" if pinned else "",
        "/*PIN_VARS*/": "\n    pinned int;\n    pinned_state text;" if pinned else "",
        "/*PIN*/": PIN if pinned else "",
        "/*RUN_COL*/": ", policy_version" if pinned else "",
        "/*RUN_VAL*/": ", cs_begin_run.policy_version" if pinned else "",
    }
    text = BEGIN_RUN
    for mark, value in marks.items():
        text = text.replace(mark, value)
    return text


def upgrade() -> None:
    op.execute("""
    CREATE TABLE policy_versions (
        version       serial PRIMARY KEY,
        instructions  text NOT NULL,
        procedures    jsonb NOT NULL DEFAULT '[]'::jsonb,
        note          text NOT NULL DEFAULT '',
        parent        int REFERENCES policy_versions (version),
        created_by    text NOT NULL,
        created_at    timestamptz NOT NULL DEFAULT now(),
        state         text NOT NULL DEFAULT 'draft'
                      CHECK (state IN ('draft', 'live', 'candidate', 'retired')),
        percent       int CHECK (percent BETWEEN 1 AND 99),
        CHECK ((state = 'candidate') = (percent IS NOT NULL))
    );
    -- one live version, at most one candidate
    CREATE UNIQUE INDEX policy_versions_one_live ON policy_versions ((true))
        WHERE state = 'live';
    CREATE UNIQUE INDEX policy_versions_one_candidate ON policy_versions ((true))
        WHERE state = 'candidate';

    -- A version's content never changes once written: only its state and percent move.
    CREATE FUNCTION cs_policy_content_fixed() RETURNS trigger LANGUAGE plpgsql AS $$
    BEGIN
        IF NEW.instructions IS DISTINCT FROM OLD.instructions
           OR NEW.procedures IS DISTINCT FROM OLD.procedures
           OR NEW.note IS DISTINCT FROM OLD.note
           OR NEW.parent IS DISTINCT FROM OLD.parent
           OR NEW.created_by IS DISTINCT FROM OLD.created_by
           OR NEW.created_at IS DISTINCT FROM OLD.created_at
           OR NEW.version IS DISTINCT FROM OLD.version THEN
            RAISE EXCEPTION 'policy version % is immutable', OLD.version;
        END IF;
        RETURN NEW;
    END $$;
    CREATE TRIGGER policy_versions_content_fixed BEFORE UPDATE ON policy_versions
        FOR EACH ROW EXECUTE FUNCTION cs_policy_content_fixed();

    -- Every change of state: who, when, and for a forced publish why.
    CREATE TABLE policy_events (
        id          bigserial PRIMARY KEY,
        version     int NOT NULL REFERENCES policy_versions (version),
        action      text NOT NULL,      -- created | live | candidate | retired
        percent     int,
        actor       text NOT NULL,
        forced      bool NOT NULL DEFAULT false,
        reason      text,
        at          timestamptz NOT NULL DEFAULT now()
    );
    CREATE INDEX policy_events_version ON policy_events (version, id);

    -- The gate: a version's evaluation against live, run through the service.
    CREATE TABLE policy_tests (
        id          text PRIMARY KEY,
        version     int NOT NULL REFERENCES policy_versions (version),
        baseline    int NOT NULL REFERENCES policy_versions (version),
        status      text NOT NULL DEFAULT 'running'
                    CHECK (status IN ('running', 'passed', 'regressed', 'failed')),
        compare     jsonb,
        markdown    text,
        error       text,
        created_by  text NOT NULL,
        created_at  timestamptz NOT NULL DEFAULT now(),
        finished_at timestamptz
    );
    CREATE INDEX policy_tests_version ON policy_tests (version, created_at DESC);

    -- Threads moved to live because their version was retired.
    CREATE TABLE policy_moves (
        id            bigserial PRIMARY KEY,
        thread_id     text NOT NULL,
        from_version  int NOT NULL,
        to_version    int,
        at            timestamptz NOT NULL DEFAULT now()
    );
    CREATE INDEX policy_moves_thread ON policy_moves (thread_id);

    -- Existing threads and runs were answered by version 1 (fast default: no rewrite).
    ALTER TABLE threads ADD COLUMN policy_version int DEFAULT 1;
    ALTER TABLE threads ALTER COLUMN policy_version DROP DEFAULT;
    ALTER TABLE runs ADD COLUMN policy_version int DEFAULT 1;
    ALTER TABLE runs ALTER COLUMN policy_version DROP DEFAULT;

    -- A conversation's outcome carries the version that answered its last turn, taken
    -- from the thread as the sweep writes the outcome (kept when the thread is gone), so
    -- analytics can compare versions without the sweep knowing about them.
    ALTER TABLE conversation_outcomes ADD COLUMN policy_version int DEFAULT 1;
    ALTER TABLE conversation_outcomes ALTER COLUMN policy_version DROP DEFAULT;
    CREATE INDEX conversation_outcomes_policy
        ON conversation_outcomes (policy_version, started_at);
    CREATE FUNCTION cs_outcome_policy() RETURNS trigger LANGUAGE plpgsql AS $$
    BEGIN
        NEW.policy_version := coalesce(
            (SELECT t.policy_version FROM threads t WHERE t.thread_id = NEW.thread_id),
            CASE WHEN TG_OP = 'UPDATE' THEN OLD.policy_version END,
            NEW.policy_version);
        RETURN NEW;
    END $$;
    CREATE TRIGGER conversation_outcomes_policy
        BEFORE INSERT OR UPDATE ON conversation_outcomes
        FOR EACH ROW EXECUTE FUNCTION cs_outcome_policy();

    -- Whose help centre `help_articles` holds: the shipped articles (kept current at every
    -- start) or a company's own (`cs-agent help import DIR`), which a start leaves alone.
    CREATE TABLE help_source (
        only_row     bool PRIMARY KEY DEFAULT true CHECK (only_row),
        source       text NOT NULL CHECK (source IN ('shipped', 'imported')),
        changed_by   text NOT NULL,
        changed_at   timestamptz NOT NULL DEFAULT now()
    );
    """)
    rules = _literal(SHIPPED_INSTRUCTIONS)
    op.execute(
        "INSERT INTO policy_versions (instructions, note, created_by, state)"
        f" VALUES ({rules}, 'the rules shipped with cs-agent', 'migration', 'live')"
    )
    op.execute("INSERT INTO policy_events (version, action, actor) VALUES (1, 'live', 'migration')")
    op.execute(f"DROP FUNCTION {SIGNATURE}")
    op.execute(begin_run(pinned=True))


def downgrade() -> None:
    op.execute(f"DROP FUNCTION {SIGNATURE}")
    op.execute(begin_run(pinned=False))
    op.execute("""
    DROP TABLE help_source;
    DROP TRIGGER conversation_outcomes_policy ON conversation_outcomes;
    DROP FUNCTION cs_outcome_policy();
    ALTER TABLE conversation_outcomes DROP COLUMN policy_version;
    ALTER TABLE runs DROP COLUMN policy_version;
    ALTER TABLE threads DROP COLUMN policy_version;
    DROP TABLE policy_moves, policy_tests, policy_events, policy_versions;
    DROP FUNCTION cs_policy_content_fixed();
    """)


def _literal(text: str) -> str:
    """A dollar-quoted SQL literal (the text holds quotes, never this tag)."""
    assert "$rules$" not in text
    return f"$rules${text}$rules$"
