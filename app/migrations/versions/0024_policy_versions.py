"""Policies as versioned data (issue 42).

Revision ID: 0024
Revises: 0023

The agent's rules (the instructions the system prompt carries and a list of procedures)
become immutable rows, numbered 1, 2, 3...; one is live, at most one is a candidate that
answers `percent` of new conversations. Version 1 is today's shipped rules, so an upgrade
changes nothing a model is told.

A thread is pinned to a version at its first turn, by the statement that opens every run
(`cs_begin_run`, app/db/sql/30_runs.sql): the candidate when the thread id's bucket (the
first 32 bits of its md5, mod 100) is under the candidate's percent, else live. Later
turns read the pin there, at the cost of one primary-key join in a statement the turn
runs anyway; a thread whose version was retired (a rollback) moves to live at its next
turn, recorded in `policy_moves`. Each run records its version. Existing threads and
runs were answered by version 1 (a column default, so no table rewrite).
"""

from alembic import op

revision = "0024"
down_revision = "0023"

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

# cs_begin_run gains `policy_version` (an OUT parameter: its new definition is in
# app/db/sql/30_runs.sql, created after this drop).
SIGNATURE = "cs_begin_run(text, text, text, text, text, int, text, text, float8, float8, bigint)"


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
    op.execute(f"DROP FUNCTION IF EXISTS {SIGNATURE}")


def downgrade() -> None:
    op.execute(f"DROP FUNCTION IF EXISTS {SIGNATURE}")
    op.execute("""
    DROP TABLE help_source;
    DROP TRIGGER IF EXISTS conversation_outcomes_policy ON conversation_outcomes;
    DROP FUNCTION IF EXISTS cs_outcome_policy();
    ALTER TABLE conversation_outcomes DROP COLUMN policy_version;
    ALTER TABLE runs DROP COLUMN policy_version;
    ALTER TABLE threads DROP COLUMN policy_version;
    DROP TABLE policy_moves, policy_tests, policy_events, policy_versions;
    DROP FUNCTION IF EXISTS cs_policy_content_fixed();
    """)


def _literal(text: str) -> str:
    """A dollar-quoted SQL literal (the text holds quotes, never this tag)."""
    assert "$rules$" not in text
    return f"$rules${text}$rules$"
