"""Help-centre articles with a weighted full-text search vector.

Revision ID: 0003
Revises: 0002

Only the table lives here. The articles themselves ship with the code (app/help/*.md) and are
written by `app.help.repository.sync_help_articles`, which the CLI runs after migrating, so an
edit to an article needs no new migration.
"""

from alembic import op

revision = "0003"
down_revision = "0002"


def upgrade() -> None:
    op.execute("""
    CREATE TABLE help_articles (
        id          text PRIMARY KEY CHECK (id ~ '^[a-z0-9]+(-[a-z0-9]+)*$'),  -- a slug
        title       text NOT NULL,
        body        text NOT NULL,
        updated_at  date NOT NULL,
        -- English stems rank title (A) above body (B). The 'simple' copy (D) keeps every word
        -- unstemmed, so ids, numbers and prefixes ('refun:*') of the literal words match too.
        search      tsvector GENERATED ALWAYS AS (
                        setweight(to_tsvector('english', title), 'A')
                     || setweight(to_tsvector('english', body), 'B')
                     || setweight(to_tsvector('simple', id || ' ' || title || ' ' || body), 'D')
                    ) STORED
    );
    CREATE INDEX help_articles_search_idx ON help_articles USING gin (search);
    """)
