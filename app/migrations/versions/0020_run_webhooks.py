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

    CREATE FUNCTION cs_enqueue_run_webhook() RETURNS trigger LANGUAGE plpgsql AS $$
    BEGIN
        INSERT INTO webhook_outbox (event_id, run_id, thread_id, type, url, rendered, payload)
        VALUES ('msg_' || replace(gen_random_uuid()::text, '-', ''), NEW.run_id,
                NEW.thread_id, 'run.finished', NEW.webhook, false, jsonb_build_object(
                    'run_id', NEW.run_id,
                    'status', NEW.status,
                    -- the checkpoint it ended on; an abandoned run has none recorded: the
                    -- thread's newest, as the claim that abandoned it found it
                    'checkpoint_id', coalesce(NEW.result->>'checkpoint_id', (
                        SELECT c.checkpoint_id FROM checkpoints c
                        WHERE c.thread_id = NEW.thread_id AND c.checkpoint_ns = ''
                        ORDER BY c.checkpoint_id DESC LIMIT 1)),
                    'ended_at', to_char(coalesce(NEW.finished_at, now()) AT TIME ZONE 'UTC',
                                        'YYYY-MM-DD"T"HH24:MI:SS.US"Z"')))
        ON CONFLICT (run_id) DO NOTHING;
        RETURN NULL;
    END $$;
    -- The WHEN clause is all a run without a webhook pays: no function call.
    CREATE TRIGGER runs_webhook AFTER UPDATE OF status, webhook ON runs
        FOR EACH ROW
        WHEN (NEW.webhook IS NOT NULL AND NEW.status <> 'running'
              AND (OLD.status = 'running' OR OLD.webhook IS NULL))
        EXECUTE FUNCTION cs_enqueue_run_webhook();
    """)


def downgrade() -> None:
    op.execute("""
    DROP TRIGGER runs_webhook ON runs;
    DROP FUNCTION cs_enqueue_run_webhook();
    DROP TABLE webhook_keys;
    DELETE FROM webhook_outbox WHERE thread_event_id IS NULL;
    ALTER TABLE webhook_outbox DROP COLUMN rendered, DROP COLUMN url, DROP COLUMN run_id,
        ALTER COLUMN thread_event_id SET NOT NULL;
    ALTER TABLE runs DROP COLUMN metadata, DROP COLUMN webhook;
    """)
