"""A deleted conversation's client_message_ids are remembered for a while.

Revision ID: 0022
Revises: 0021

Found by the chaos soak: a deleted thread (the client had its 204) came back with its index
row and a run. A replica stalled (SIGSTOP) with the thread's first message in its socket;
the balancer cut the client's connection, the client sent the message again (same
client_message_id) to another replica, got its answer, deleted the thread; then the stalled
replica woke and started the old copy as a new conversation. A delete now keeps the
thread's client_message_ids (`deleted_messages`, pruned with finished runs' logs after
RUN_LOG_TTL_S), and the statement that opens a run refuses one of them on a thread that does
not exist (`409 message_deleted`), under its claim (a delete holds the lease until it
commits), creating nothing and leaving the lease free. A new
conversation under the same id with new message ids is not affected.
"""

from alembic import op

revision = "0022"
down_revision = "0021"


def upgrade() -> None:
    op.execute("""
    CREATE TABLE deleted_messages (
        thread_id         text NOT NULL,
        client_message_id text NOT NULL,
        deleted_at        timestamptz NOT NULL DEFAULT now(),
        PRIMARY KEY (thread_id, client_message_id)
    );
    CREATE INDEX deleted_messages_at ON deleted_messages (deleted_at);

    """)


def downgrade() -> None:
    op.execute("""
    DROP TABLE deleted_messages;
    """)
