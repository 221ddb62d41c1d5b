"""Run webhooks and run metadata (the LangGraph API, issue 28): a run may name a URL that is
told how it ended, through the handoff webhooks' outbox (0013) and its worker.

Revision ID: 0020
Revises: 0019

`runs.webhook` and `runs.metadata` are set, for a run that asks for either, by one UPDATE
after the run opens (app/api/lg/webhooks.py): a run without them costs nothing more.

A trigger enqueues the run's event in the transaction that ends the run, whichever
statement ends it: the run's own closing statement, or the claim that closes a dead
process's run as abandoned (cs_begin_run, retry_run). It also fires when the URL is set
on a run that has already ended (an instant run can end before its URL is stored), so
the event is enqueued once either way (`run_id` is unique). The row holds what the run
ended on (status, checkpoint); the body, with the state's values, is rendered by the
worker at the first try and kept, so every retry sends the same bytes.

`url` NULL is a handoff event, sent to HANDOFF_WEBHOOK_URL; a run's row carries its own.
`webhook_keys` keeps the run webhooks' signing secret when RUN_WEBHOOK_SECRET is unset:
generated once, the same on every replica and across restarts.
"""

from alembic import op

revision = "0020"
down_revision = "0019"


def upgrade() -> None:
    op.execute("""
    ALTER TABLE runs ADD COLUMN webhook text, ADD COLUMN metadata jsonb;

    ALTER TABLE webhook_outbox
        ALTER COLUMN thread_event_id DROP NOT NULL,
        ADD COLUMN run_id text UNIQUE,           -- one event per run, at most
        ADD COLUMN url text,                     -- NULL: HANDOFF_WEBHOOK_URL
        ADD COLUMN rendered boolean NOT NULL DEFAULT true;  -- false: the body is to render

    CREATE TABLE webhook_keys (
        name       text PRIMARY KEY,
        secret     text NOT NULL,
        created_at timestamptz NOT NULL DEFAULT now()
    );

    """)


def downgrade() -> None:
    op.execute("""
    DROP TRIGGER IF EXISTS runs_webhook ON runs;
    DROP FUNCTION IF EXISTS cs_enqueue_run_webhook();
    DROP TABLE webhook_keys;
    DELETE FROM webhook_outbox WHERE thread_event_id IS NULL;
    ALTER TABLE webhook_outbox DROP COLUMN rendered, DROP COLUMN url, DROP COLUMN run_id,
        ALTER COLUMN thread_event_id SET NOT NULL;
    ALTER TABLE runs DROP COLUMN metadata, DROP COLUMN webhook;
    """)
