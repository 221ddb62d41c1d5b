-- Notifications that wake the background loops of every replica (app/db/listen.py): each
-- loop still polls slowly, so a notification lost (a listener reconnecting, a deployment
-- with no direct connection for LISTEN) delays work, never loses it. Channels:
--   cs_thread_events  a thread's stream has new events (the /events pages, the console)
--   cs_webhooks       a webhook is due (sent by the enqueueing functions, 50_webhooks.sql)
--   cs_run_requests   a run was asked to stop or to ship its log (sent by the request)
-- One notification per statement: a commit's notifications with the same payload fold
-- into one, and the readers poll by cursor, so the payload carries nothing.
CREATE OR REPLACE FUNCTION cs_notify_thread_events() RETURNS trigger LANGUAGE plpgsql AS $$
BEGIN
    PERFORM pg_notify('cs_thread_events', '');
    RETURN NULL;
END $$;

CREATE OR REPLACE TRIGGER thread_events_notify AFTER INSERT ON thread_events
    FOR EACH STATEMENT EXECUTE FUNCTION cs_notify_thread_events();
