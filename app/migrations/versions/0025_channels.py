"""Channels: conversations that arrive from Chatwoot or by email (docs/channels.md).

Revision ID: 0025
Revises: 0024

`channel_conversations` binds a channel's conversation (a Chatwoot `account/conversation`,
an email thread's first Message-ID) to our thread, and to the identity it was opened with,
so every later message lands on the same thread whoever resolves it.

`channel_inbox` holds each message a channel delivered, stored before the channel is
answered 200: a crash after the acknowledgement loses nothing, and a redelivery finds its
row (`UNIQUE (channel, delivery_key)`). Every replica claims due rows with FOR UPDATE SKIP
LOCKED (a claim is a lease, renewed while the turn runs); a conversation's rows are taken
in order, one at a time.

`channel_outbox` holds what goes back: one row per answer, note or status change, keyed by
`answer_key` (unique: the idempotency record, so a turn replayed after a crash adds
nothing), sent by every replica's worker with backoff. A row whose send was begun and never
recorded (`sending_since`, its process died) is not sent again: at most once.

`email_message_ids` maps every Message-ID of an email thread (received and sent) to its
conversation, for `In-Reply-To` / `References`; `channel_confirmations` keeps the one-time
tokens of confirmation emails (hashed).

`conversation_outcomes.channel` keeps the channel a conversation happened on (the thread's
`metadata.channel`, NULL: the chat page) for analytics, which outlive the thread: a trigger
copies it when the sweep writes the outcome, so the sweep itself is unchanged.
"""

from alembic import op

revision = "0025"
down_revision = "0024"


def upgrade() -> None:
    op.execute("""
    CREATE TABLE channel_conversations (
        channel          text NOT NULL,
        conversation_key text NOT NULL,
        thread_id        text NOT NULL UNIQUE,
        user_id          text NOT NULL,
        role             text NOT NULL,
        session_id       text NOT NULL,
        link             text,
        address          jsonb NOT NULL DEFAULT '{}'::jsonb,  -- where answers go
        created_at       timestamptz NOT NULL DEFAULT now(),
        PRIMARY KEY (channel, conversation_key)
    );

    CREATE TABLE channel_inbox (
        id               bigserial PRIMARY KEY,
        channel          text NOT NULL,
        delivery_key     text NOT NULL,
        conversation_key text NOT NULL,
        kind             text NOT NULL,      -- message | decision | release
        body             jsonb NOT NULL,
        received_at      timestamptz NOT NULL DEFAULT now(),
        attempts         int NOT NULL DEFAULT 0,
        next_attempt_at  timestamptz NOT NULL DEFAULT now(),  -- also a claim's lease
        done_at          timestamptz,
        outcome          text,
        UNIQUE (channel, delivery_key)
    );
    CREATE INDEX channel_inbox_due ON channel_inbox (next_attempt_at) WHERE done_at IS NULL;
    CREATE INDEX channel_inbox_conversation ON channel_inbox (channel, conversation_key, id)
        WHERE done_at IS NULL;

    CREATE TABLE channel_outbox (
        id               bigserial PRIMARY KEY,
        channel          text NOT NULL,
        answer_key       text NOT NULL UNIQUE,
        conversation_key text NOT NULL,
        thread_id        text NOT NULL,
        kind             text NOT NULL,      -- message | note | status | email
        body             jsonb NOT NULL,
        created_at       timestamptz NOT NULL DEFAULT now(),
        attempts         int NOT NULL DEFAULT 0,
        next_attempt_at  timestamptz NOT NULL DEFAULT now(),
        sending_since    timestamptz,
        delivered_at     timestamptz,
        failed_at        timestamptz,
        last_error       text
    );
    CREATE INDEX channel_outbox_due ON channel_outbox (next_attempt_at)
        WHERE delivered_at IS NULL AND failed_at IS NULL;
    CREATE INDEX channel_outbox_thread ON channel_outbox (thread_id, created_at);

    CREATE TABLE email_message_ids (
        message_id       text PRIMARY KEY,
        conversation_key text NOT NULL,
        created_at       timestamptz NOT NULL DEFAULT now()
    );

    CREATE TABLE channel_confirmations (
        token_hash  text PRIMARY KEY,
        thread_id   text NOT NULL,
        created_at  timestamptz NOT NULL DEFAULT now(),
        used_at     timestamptz,
        used_by     bigint      -- the inbox row that spent it (handled again: still its)
    );
    CREATE INDEX channel_confirmations_thread ON channel_confirmations (thread_id);

    ALTER TABLE conversation_outcomes ADD COLUMN channel text;
    """)


def downgrade() -> None:
    op.execute("""
    DROP TRIGGER IF EXISTS threads_forget_channel ON threads;
    DROP FUNCTION IF EXISTS cs_forget_thread_channel();
    DROP TRIGGER IF EXISTS conversation_outcomes_channel ON conversation_outcomes;
    DROP FUNCTION IF EXISTS cs_outcome_channel();
    ALTER TABLE conversation_outcomes DROP COLUMN channel;
    DROP TABLE channel_confirmations;
    DROP TABLE email_message_ids;
    DROP TABLE channel_outbox;
    DROP TABLE channel_inbox;
    DROP TABLE channel_conversations;
    """)
