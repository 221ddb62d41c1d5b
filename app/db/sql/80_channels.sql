-- Chatwoot and email conversations (app/channels, migration 0025).

-- A deleted thread (DELETE /threads, erase, retention) takes its channel records with
-- it: they hold what the customer wrote. A later message of the same conversation
-- starts a new thread.
CREATE OR REPLACE FUNCTION cs_forget_thread_channel() RETURNS trigger LANGUAGE plpgsql AS $$
DECLARE
    conv channel_conversations%ROWTYPE;
BEGIN
    SELECT * INTO conv FROM channel_conversations c WHERE c.thread_id = OLD.thread_id;
    IF FOUND THEN
        DELETE FROM channel_inbox
            WHERE channel = conv.channel AND conversation_key = conv.conversation_key;
        DELETE FROM email_message_ids WHERE conversation_key = conv.conversation_key;
        DELETE FROM channel_conversations WHERE thread_id = OLD.thread_id;
    END IF;
    DELETE FROM channel_outbox WHERE thread_id = OLD.thread_id;
    DELETE FROM channel_confirmations WHERE thread_id = OLD.thread_id;
    RETURN OLD;
END $$;
CREATE OR REPLACE TRIGGER threads_forget_channel AFTER DELETE ON threads
    FOR EACH ROW EXECUTE FUNCTION cs_forget_thread_channel();

-- An outcome carries its conversation's channel (analytics by channel).
CREATE OR REPLACE FUNCTION cs_outcome_channel() RETURNS trigger LANGUAGE plpgsql AS $$
BEGIN
    NEW.channel := coalesce((SELECT t.metadata->>'channel' FROM threads t
                             WHERE t.thread_id = NEW.thread_id), NEW.channel);
    RETURN NEW;
END $$;
CREATE OR REPLACE TRIGGER conversation_outcomes_channel BEFORE INSERT OR UPDATE
    ON conversation_outcomes FOR EACH ROW EXECUTE FUNCTION cs_outcome_channel();
