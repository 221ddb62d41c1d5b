"""Who answers a thread: the agent, nobody yet (queued after a handoff), or a named person.

Revision ID: 0011
Revises: 0010

The control state lives on the thread's lease row: the claim of every run already locks
that row (`cs_claim_thread`), so a turn learns who answers at no extra round trip, and a
change of control serialises with the claim. Every change increments `control_version` and
is compare-and-set on it (`cs_control`), so of two people accepting one thread exactly one
wins; each change is kept in `control_history`. `thread_events` is the thread's own stream
(messages of all authors, control changes, runs), read by id from any replica.
"""

from alembic import op

revision = "0011"
down_revision = "0010"


def upgrade() -> None:
    op.execute("""
    ALTER TABLE thread_leases
        ADD COLUMN control text NOT NULL DEFAULT 'agent',  -- agent | queued | human
        ADD COLUMN control_version bigint NOT NULL DEFAULT 0,
        ADD COLUMN assignee text,            -- the staff subject holding it (human)
        ADD COLUMN assignee_name text,
        ADD COLUMN control_summary text,     -- the agent's summary at the handoff
        ADD COLUMN control_reason text,
        ADD COLUMN control_since timestamptz;
    CREATE INDEX thread_leases_control ON thread_leases (control, control_since)
        WHERE control <> 'agent';

    CREATE TABLE control_history (
        id         bigserial PRIMARY KEY,
        thread_id  text NOT NULL,
        version    bigint NOT NULL,
        action     text NOT NULL,   -- handoff | accept | take_over | transfer | release
        actor      text NOT NULL,
        control    text NOT NULL,
        assignee   text,
        note       text,
        at         timestamptz NOT NULL DEFAULT now()
    );
    CREATE INDEX control_history_thread ON control_history (thread_id, id);

    CREATE TABLE thread_events (
        id         bigserial PRIMARY KEY,
        thread_id  text NOT NULL,
        kind       text NOT NULL,   -- message | control | run | done
        data       jsonb NOT NULL,
        created_at timestamptz NOT NULL DEFAULT now()
    );
    CREATE INDEX thread_events_thread ON thread_events (thread_id, id);



    -- cs_begin_run of 0010, and who answers the thread (`control`, read under the claim).
    DROP FUNCTION IF EXISTS cs_begin_run(
        text, text, text, text, text, int, text, text, float8, float8, bigint);
    """)
