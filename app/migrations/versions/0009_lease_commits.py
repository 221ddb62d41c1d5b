"""Leases without a flush per claim: claims and releases commit asynchronously; the fence
checks the run as well as the generation.

Revision ID: 0009
Revises: 0008

A claim and a release are two commits a turn, and each waited for its WAL flush (about
1.5 ms each here), more than the rest of what one writer per thread costs. They commit
asynchronously now. That is safe because nothing depends on a claim being durable before
the run's first fenced commit, which is synchronous and so flushes the WAL before it, claim
included. If Postgres crashes before then, the claim may be lost and the same generation
handed to another run: the fence therefore also checks the run id, so two runs can never
both pass it.
"""

from alembic import op

revision = "0009"
down_revision = "0008"


def upgrade() -> None:
    # cs_fence gained the run id (its new signature: app/db/sql/20_leases.sql)
    op.execute("DROP FUNCTION IF EXISTS cs_fence(text, bigint, int)")
