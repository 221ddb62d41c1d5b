"""The handoff webhooks' outbox: each event a helpdesk is told about, enqueued once.

Revision ID: 0013
Revises: 0012

A trigger on `thread_events` (0011, the thread's own stream) enqueues the events a helpdesk
bridge needs, in the transaction that wrote the thread event, so an event is enqueued
exactly once (one outbox row per thread event, `thread_event_id` is unique) and never lost
to a crash between the two. Each row carries its body (what is signed and sent, the same
bytes on every attempt) and its `event_id`, kept across retries. Delivery
(app/notify/webhooks.py) claims due rows with FOR UPDATE SKIP LOCKED from every replica.

  control, state queued   -> handoff.queued (with the agent's summary)
  control, state human    -> handoff.accepted (accept or take_over), handoff.transferred
  control, state agent    -> handoff.released (with the release note)
  message, author customer -> message.customer (only a held thread's customer messages are
                              on the stream: app/runs/held.py)
"""

from alembic import op

revision = "0013"
down_revision = "0012"


def upgrade() -> None:
    op.execute("""
    CREATE TABLE webhook_outbox (
        id              bigserial PRIMARY KEY,
        event_id        text NOT NULL UNIQUE,     -- webhook-id: the same on every attempt
        thread_event_id bigint NOT NULL UNIQUE,   -- one row per thread event, at most
        thread_id       text NOT NULL,
        type            text NOT NULL,
        payload         jsonb NOT NULL,           -- the body: {type, timestamp, data}
        created_at      timestamptz NOT NULL DEFAULT now(),
        attempts        int NOT NULL DEFAULT 0,
        next_attempt_at timestamptz NOT NULL DEFAULT now(),  -- also a claim's lease
        delivered_at    timestamptz,
        failed_at       timestamptz,              -- given up on
        last_status     int,
        last_error      text
    );
    CREATE INDEX webhook_outbox_due ON webhook_outbox (next_attempt_at)
        WHERE delivered_at IS NULL AND failed_at IS NULL;
    CREATE INDEX webhook_outbox_thread ON webhook_outbox (thread_id, id)
        WHERE delivered_at IS NULL AND failed_at IS NULL;
    CREATE INDEX webhook_outbox_created ON webhook_outbox (created_at);


    """)
