-- Policy versions (app/policies, migration 0024).
-- A version's content never changes once written: only its state and percent move.
CREATE OR REPLACE FUNCTION cs_policy_content_fixed() RETURNS trigger LANGUAGE plpgsql AS $$
BEGIN
    IF NEW.instructions IS DISTINCT FROM OLD.instructions
       OR NEW.procedures IS DISTINCT FROM OLD.procedures
       OR NEW.note IS DISTINCT FROM OLD.note
       OR NEW.parent IS DISTINCT FROM OLD.parent
       OR NEW.created_by IS DISTINCT FROM OLD.created_by
       OR NEW.created_at IS DISTINCT FROM OLD.created_at
       OR NEW.version IS DISTINCT FROM OLD.version THEN
        RAISE EXCEPTION 'policy version % is immutable', OLD.version;
    END IF;
    RETURN NEW;
END $$;
CREATE OR REPLACE TRIGGER policy_versions_content_fixed BEFORE UPDATE ON policy_versions
    FOR EACH ROW EXECUTE FUNCTION cs_policy_content_fixed();

-- A conversation's outcome carries the version that answered its last turn, taken from
-- the thread as the sweep writes the outcome (kept when the thread is gone).
CREATE OR REPLACE FUNCTION cs_outcome_policy() RETURNS trigger LANGUAGE plpgsql AS $$
BEGIN
    NEW.policy_version := coalesce(
        (SELECT t.policy_version FROM threads t WHERE t.thread_id = NEW.thread_id),
        CASE WHEN TG_OP = 'UPDATE' THEN OLD.policy_version END,
        NEW.policy_version);
    RETURN NEW;
END $$;
CREATE OR REPLACE TRIGGER conversation_outcomes_policy
    BEFORE INSERT OR UPDATE ON conversation_outcomes
    FOR EACH ROW EXECUTE FUNCTION cs_outcome_policy();
