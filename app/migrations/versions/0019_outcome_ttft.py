"""Each conversation's per-run time to first token, on its outcome (issue 29).

Revision ID: 0019
Revises: 0018

`runs.ttft_ms` (0016) goes when the thread does (a delete, retention), and the outcome
outlives it, so the outcome keeps the values of its runs that streamed a token, in order.
The summary's `ttft_p50_ms` and `ttft_p95_ms` are percentiles over all of a period's runs,
not over each conversation's median (a p95 of medians would hide the slow turns).
"""

from alembic import op

revision = "0019"
down_revision = "0018"


def upgrade() -> None:
    op.execute("ALTER TABLE conversation_outcomes ADD COLUMN ttft_runs_ms int[]")


def downgrade() -> None:
    op.execute("ALTER TABLE conversation_outcomes DROP COLUMN ttft_runs_ms")
