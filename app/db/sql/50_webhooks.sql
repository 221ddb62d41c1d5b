-- Handoff and run webhooks, enqueued by the statements that make them due (a thread event,
-- a run's status): in the same transaction, so an event is never lost and never sent for
-- work that rolled back. A deleted thread's undelivered webhooks go with it.

CREATE OR REPLACE FUNCTION cs_enqueue_webhook() RETURNS trigger LANGUAGE plpgsql AS $$
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
    PERFORM pg_notify('cs_webhooks', '');  -- wakes a delivery loop (app/db/listen.py)
    RETURN NULL;
END $$;

CREATE OR REPLACE TRIGGER thread_events_webhook AFTER INSERT ON thread_events
    FOR EACH ROW EXECUTE FUNCTION cs_enqueue_webhook();

CREATE OR REPLACE FUNCTION cs_forget_thread_webhooks() RETURNS trigger LANGUAGE plpgsql AS $$
BEGIN
    DELETE FROM webhook_outbox WHERE thread_id = OLD.thread_id;
    RETURN OLD;
END $$;

CREATE OR REPLACE TRIGGER threads_forget_webhooks AFTER DELETE ON threads
    FOR EACH ROW EXECUTE FUNCTION cs_forget_thread_webhooks();

CREATE OR REPLACE FUNCTION cs_enqueue_run_webhook() RETURNS trigger LANGUAGE plpgsql AS $$
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
    PERFORM pg_notify('cs_webhooks', '');
    RETURN NULL;
END $$;

CREATE OR REPLACE TRIGGER runs_webhook AFTER UPDATE OF status, webhook ON runs
    FOR EACH ROW
    WHEN (NEW.webhook IS NOT NULL AND NEW.status <> 'running'
          AND (OLD.status = 'running' OR OLD.webhook IS NULL))
    EXECUTE FUNCTION cs_enqueue_run_webhook();
