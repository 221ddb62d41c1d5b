"""Reading help articles, and loading the shipped ones into `help_articles`.

The articles are content that ships with the code (app/help/*.md), not demo data and not a
migration: `sync_help_articles` makes the table match them, and the CLI runs it after every
migration (`serve`, `migrate`, `seed`, `data import`), so editing an article file and
restarting is the whole release process.
"""

from __future__ import annotations

from collections.abc import Sequence
from dataclasses import dataclass
from typing import Any

from psycopg import AsyncConnection
from psycopg.rows import dict_row
from psycopg_pool import AsyncConnectionPool

from app.help.articles import HelpArticle, is_article_id, shipped_articles


@dataclass(frozen=True)
class SyncSummary:
    written: int  # inserted or changed
    removed: int  # no longer shipped
    total: int


async def sync_help_articles(
    pool: AsyncConnectionPool[Any],
    articles: Sequence[HelpArticle] | None = None,
    *,
    replace_own: bool = False,
) -> SyncSummary:
    """Make `help_articles` hold exactly `articles` (default: the shipped ones). Idempotent.

    Unchanged rows are not rewritten, and rows are locked in id order, so replicas starting
    together do not deadlock or churn the index. A company's own help centre (`cs-agent
    help import`, app/help/transfer.py) is left as it is unless `replace_own`.
    """
    articles = sorted(shipped_articles() if articles is None else articles, key=lambda a: a.id)
    async with pool.connection() as conn, conn.transaction():
        if not replace_own and await _company_owned(conn):
            return SyncSummary(written=0, removed=0, total=0)
        written = 0
        async with conn.cursor() as cur:
            for a in articles:
                await cur.execute(
                    """
                    INSERT INTO help_articles (id, title, body, updated_at)
                    VALUES (%s, %s, %s, %s)
                    ON CONFLICT (id) DO UPDATE
                        SET title = EXCLUDED.title, body = EXCLUDED.body,
                            updated_at = EXCLUDED.updated_at
                        WHERE (help_articles.title, help_articles.body, help_articles.updated_at)
                            IS DISTINCT FROM (EXCLUDED.title, EXCLUDED.body, EXCLUDED.updated_at)
                    """,
                    (a.id, a.title, a.body, a.updated),
                )
                written += cur.rowcount
            await cur.execute(
                "DELETE FROM help_articles WHERE NOT (id = ANY(%s))", ([a.id for a in articles],)
            )
            removed = cur.rowcount
    return SyncSummary(written=written, removed=removed, total=len(articles))


async def _company_owned(conn: AsyncConnection[Any]) -> bool:
    # locked: an import and a start's sync do not interleave
    async with conn.cursor(row_factory=dict_row) as cur:
        await cur.execute("SELECT source FROM help_source FOR UPDATE")
        row = await cur.fetchone()
    return row is not None and row["source"] == "imported"


async def get_article(pool: AsyncConnectionPool[Any], article_id: str) -> HelpArticle | None:
    """The article with this id, or None (also for text that cannot be an id)."""
    if not is_article_id(article_id):
        return None
    async with pool.connection() as conn, conn.cursor(row_factory=dict_row) as cur:
        await cur.execute(
            "SELECT id, title, body, updated_at FROM help_articles WHERE id = %s", (article_id,)
        )
        row = await cur.fetchone()
    if row is None:
        return None
    return HelpArticle(row["id"], row["title"], row["body"], row["updated_at"])
