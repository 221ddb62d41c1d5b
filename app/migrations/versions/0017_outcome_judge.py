"""The model judge's review on a conversation's outcome (issue 29).

Revision ID: 0017
Revises: 0016

`score` and `score_reasons` (0015) are the judge's; these columns record what the review
cost and let replicas share the work: a replica claims one sampled outcome at a time by
setting `judge_lease_until` (FOR UPDATE SKIP LOCKED), calls the model with no transaction
open, then stores the score only if the outcome was not recomputed meanwhile. A failed
attempt (the model erred or answered something that is not the rubric's JSON) counts in
`judge_attempts` and names why in `judge_error`; after a few the outcome stays unscored.
"""

from alembic import op

revision = "0017"
down_revision = "0016"


def upgrade() -> None:
    op.execute("""
    ALTER TABLE conversation_outcomes
        ADD COLUMN judged_at         timestamptz,
        ADD COLUMN judge_model       text,
        ADD COLUMN judge_tokens_in   int,
        ADD COLUMN judge_tokens_out  int,
        ADD COLUMN judge_cost_usd    numeric(14, 6),
        ADD COLUMN judge_attempts    int NOT NULL DEFAULT 0,
        ADD COLUMN judge_error       text,
        ADD COLUMN judge_lease_until timestamptz;
    -- what the judge step looks for: sampled outcomes never judged
    CREATE INDEX conversation_outcomes_unjudged ON conversation_outcomes (ended_at)
        WHERE judged_at IS NULL;
    """)


def downgrade() -> None:
    op.execute("""
    DROP INDEX conversation_outcomes_unjudged;
    ALTER TABLE conversation_outcomes
        DROP COLUMN judged_at, DROP COLUMN judge_model, DROP COLUMN judge_tokens_in,
        DROP COLUMN judge_tokens_out, DROP COLUMN judge_cost_usd, DROP COLUMN judge_attempts,
        DROP COLUMN judge_error, DROP COLUMN judge_lease_until;
    """)
