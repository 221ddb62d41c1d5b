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

    CREATE FUNCTION cs_enqueue_webhook() RETURNS trigger LANGUAGE plpgsql AS $$
    DECLARE
        event_type text;
        data jsonb;
        hist control_history%ROWTYPE;
        owner_row threads%ROWTYPE;
    BEGIN
        IF NEW.kind = 'message' AND NEW.data->>'author' = 'customer' THEN
            event_type := 'message.customer';
            data := jsonb_build_object(
                'state', (SELECT l.control FROM thread_leases l
                          WHERE l.thread_id = NEW.thread_id),
                'message', jsonb_build_object(
                    'id', NEW.data->'id', 'content', NEW.data->'content'));
        ELSIF NEW.kind = 'control' THEN
            SELECT * INTO hist FROM control_history h
            WHERE h.thread_id = NEW.thread_id AND h.version = (NEW.data->>'version')::bigint
            ORDER BY h.id DESC LIMIT 1;
            event_type := CASE NEW.data->>'state'
                WHEN 'queued' THEN 'handoff.queued'
                WHEN 'human' THEN CASE WHEN hist.action = 'transfer'
                                       THEN 'handoff.transferred' ELSE 'handoff.accepted' END
                WHEN 'agent' THEN 'handoff.released' END;
            data := (NEW.data - 'thread_id')
                || jsonb_build_object('action', hist.action, 'actor', hist.actor);
            IF event_type = 'handoff.released' THEN
                data := data || jsonb_build_object('note', hist.note);
            END IF;
        END IF;
        IF event_type IS NULL THEN
            RETURN NULL;
        END IF;
        SELECT * INTO owner_row FROM threads t WHERE t.thread_id = NEW.thread_id;
        data := jsonb_build_object(
            'thread_id', NEW.thread_id,
            'customer', owner_row.user_id,
            'session_id', owner_row.session_id) || data;
        INSERT INTO webhook_outbox (event_id, thread_event_id, thread_id, type, payload)
        VALUES ('msg_' || replace(gen_random_uuid()::text, '-', ''), NEW.id, NEW.thread_id,
                event_type, jsonb_build_object(
                    'type', event_type,
                    'timestamp', to_char(NEW.created_at AT TIME ZONE 'UTC',
                                         'YYYY-MM-DD"T"HH24:MI:SS.US"Z"'),
                    'data', data))
        ON CONFLICT (thread_event_id) DO NOTHING;
        RETURN NULL;
    END $$;
    CREATE TRIGGER thread_events_webhook AFTER INSERT ON thread_events
        FOR EACH ROW EXECUTE FUNCTION cs_enqueue_webhook();

    -- A deleted thread (DELETE /threads, erase, retention) takes its webhook events with
    -- it: they hold what the customer wrote. One not yet delivered is not sent.
    CREATE FUNCTION cs_forget_thread_webhooks() RETURNS trigger LANGUAGE plpgsql AS $$
    BEGIN
        DELETE FROM webhook_outbox WHERE thread_id = OLD.thread_id;
        RETURN OLD;
    END $$;
    CREATE TRIGGER threads_forget_webhooks AFTER DELETE ON threads
        FOR EACH ROW EXECUTE FUNCTION cs_forget_thread_webhooks();
    """)
