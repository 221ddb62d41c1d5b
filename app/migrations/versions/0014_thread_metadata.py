"""Thread metadata, as the LangGraph Platform API stores it (issue 28).

Revision ID: 0014
Revises: 0013

What a client tags a thread with (`threads.create(metadata=...)`, `threads.update`,
merged), searched by containment (`metadata @> filter`) within the caller's threads: a GIN
index (jsonb_path_ops: containment only, smaller than the default operator class). The
`graph_id` and `assistant_id` keys are the server's and not stored (app/api/lg/views.py
adds them to every thread).
"""

from alembic import op

revision = "0014"
down_revision = "0013"


def upgrade() -> None:
    op.execute("""
    ALTER TABLE threads ADD COLUMN metadata jsonb NOT NULL DEFAULT '{}'::jsonb;
    CREATE INDEX threads_metadata_idx ON threads USING gin (metadata jsonb_path_ops);
    """)
