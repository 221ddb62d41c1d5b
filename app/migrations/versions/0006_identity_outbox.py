"""Guest identity codes and the outbox of messages sent.

Revision ID: 0006
Revises: 0005

Knowing a customer's email is not proof of being that customer. A guest conversation becomes
a customer's only after the guest types back a one-time code sent to the customer's
registered address. A code is kept only as HMAC-SHA256(server key, salt || code).

A lookup that matched nobody still gets a row (customer_id NULL, a random code that is never
sent), so "not found" and "code sent" behave the same, attempts included.
"""

from alembic import op

revision = "0006"
down_revision = "0005"


def upgrade() -> None:
    op.execute("""
    CREATE TABLE identity_codes (
        id           bigserial PRIMARY KEY,
        thread_id    text NOT NULL,            -- the conversation the code would verify
        requested_by text NOT NULL,            -- the token subject that asked for it
        customer_id  text REFERENCES customers(id) ON DELETE CASCADE,  -- NULL: a decoy
        salt         bytea NOT NULL,
        code_hash    bytea NOT NULL,
        attempts     int NOT NULL DEFAULT 0,
        max_attempts int NOT NULL,
        created_at   timestamptz NOT NULL DEFAULT now(),
        expires_at   timestamptz NOT NULL,
        closed_at    timestamptz,              -- verified, replaced, or out of attempts
        verified_at  timestamptz
    );
    CREATE INDEX identity_codes_open_idx ON identity_codes (thread_id, id)
        WHERE closed_at IS NULL;
    CREATE INDEX identity_codes_requester_idx ON identity_codes (requested_by, created_at);
    CREATE INDEX identity_codes_customer_idx ON identity_codes (customer_id, created_at);
    CREATE INDEX identity_codes_expires_idx ON identity_codes (expires_at);

    -- Every message sent to a customer. With the log sender (dev) this table and the log are
    -- the delivery; with a real sender the code in `body` is masked.
    CREATE TABLE outbox (
        id           bigserial PRIMARY KEY,
        recipient    text NOT NULL,
        subject      text NOT NULL,
        body         text NOT NULL,
        created_at   timestamptz NOT NULL DEFAULT now(),
        requested_by text,                     -- the token subject whose conversation sent it
        thread_id    text,
        sent_at      timestamptz,
        failed_at    timestamptz
    );
    CREATE INDEX outbox_requested_by_idx ON outbox (requested_by, id);
    """)
