"""`audit_log.before_image`: the rows a write could change, as they were when it locked them,
so a recorded conversation can be replayed against the records as they were at its start
(`cs-agent eval record`, app/eval/record.py).

Revision ID: 0018
Revises: 0017

Written by the audit row's own INSERT (app/db/writes.py; no extra statement): an object
keyed by what was locked, `order:<id>` (the order row with all its items, fulfillments and
payments) and `customer:<id>` (the customer row with all their payment methods), each a
table name mapped to its rows as `to_jsonb` gives them. A whole group, never single rows,
so the rows a write inserted are the ones its image does not list. `{}`: the write locked
no shop rows (a hand-over ticket). null: nothing changed (a refusal, a failure) or the row
predates this column. Erasing personal data drops the names, emails and addresses from it
(app/db/erase.py).
"""

from alembic import op

revision = "0018"
down_revision = "0017"


def upgrade() -> None:
    op.execute("""
    ALTER TABLE audit_log ADD COLUMN before_image jsonb;
    CREATE INDEX audit_log_customer_idx ON audit_log (customer_id, id);
    """)


def downgrade() -> None:
    op.execute("""
    DROP INDEX audit_log_customer_idx;
    ALTER TABLE audit_log DROP COLUMN before_image;
    """)
