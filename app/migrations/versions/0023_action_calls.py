"""A call to a company's own action (an MCP tool, an HTTP operation) is recorded before it
is sent.

Revision ID: 0023
Revises: 0022

A built-in write commits its effect and its `tool_executions` row in one transaction. A
remote call cannot join that transaction, so its row is committed first in state `sent`,
then updated with the result (`done`), or marked `unknown` when no answer came back and the
call may not be resent (app/actions/ledger.py). Built-in writes are always `done`.
"""

from alembic import op

revision = "0023"
down_revision = "0022"


def upgrade() -> None:
    op.execute("""
    ALTER TABLE tool_executions
        ADD COLUMN state text NOT NULL DEFAULT 'done'
            CHECK (state IN ('sent', 'done', 'unknown')),
        ADD COLUMN attempts int NOT NULL DEFAULT 1;
    """)


def downgrade() -> None:
    op.execute("ALTER TABLE tool_executions DROP COLUMN state, DROP COLUMN attempts")
