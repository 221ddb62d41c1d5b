"""A company's own help centre: `cs-agent help import DIR` and `help export DIR`.

A folder holds one `<id>.md` per article, in the shipped articles' format (app/help/
articles.py: `# Title`, `updated: YYYY-MM-DD`, a blank line, the body). An import replaces
every article with the folder's and marks the help centre as the company's own
(`help_source`, migration 0024), so a start no longer puts the shipped articles back;
`help import --shipped` returns to them.
"""

from __future__ import annotations

from collections.abc import Sequence
from pathlib import Path
from typing import Any

from psycopg.rows import dict_row
from psycopg_pool import AsyncConnectionPool

from app.help.articles import HelpArticle, parse_article, shipped_articles
from app.help.repository import SyncSummary, sync_help_articles

MAX_ARTICLE_BYTES = 200_000

SET_SOURCE = """INSERT INTO help_source (only_row, source, changed_by) VALUES (true, %s, %s)
    ON CONFLICT (only_row) DO UPDATE
        SET source = EXCLUDED.source, changed_by = EXCLUDED.changed_by, changed_at = now()"""


def read_articles(folder: Path) -> list[HelpArticle]:
    """Every `*.md` of `folder`; ValueError names the first file that cannot be read."""
    if not folder.is_dir():
        raise ValueError(f"{folder}: not a folder")
    articles = []
    for path in sorted(folder.glob("*.md")):
        if path.stat().st_size > MAX_ARTICLE_BYTES:
            raise ValueError(f"{path.name}: larger than {MAX_ARTICLE_BYTES} bytes")
        articles.append(parse_article(path.stem, path.read_text(encoding="utf-8")))
    if not articles:
        raise ValueError(f"{folder}: no <id>.md articles")
    return articles


def article_text(article: HelpArticle) -> str:
    return f"# {article.title}\nupdated: {article.updated.isoformat()}\n\n{article.body}\n"


async def import_articles(
    pool: AsyncConnectionPool[Any], articles: Sequence[HelpArticle] | None, actor: str
) -> SyncSummary:
    """`articles` become the whole help centre (None: the shipped ones, again)."""
    summary = await sync_help_articles(pool, articles or shipped_articles(), replace_own=True)
    async with pool.connection() as conn:
        await conn.execute(SET_SOURCE, ("shipped" if articles is None else "imported", actor))
    return summary


async def current_articles(pool: AsyncConnectionPool[Any]) -> list[HelpArticle]:
    async with pool.connection() as conn, conn.cursor(row_factory=dict_row) as cur:
        await cur.execute("SELECT id, title, body, updated_at FROM help_articles ORDER BY id")
        rows = await cur.fetchall()
    return [HelpArticle(r["id"], r["title"], r["body"], r["updated_at"]) for r in rows]


def write_articles(folder: Path, articles: Sequence[HelpArticle]) -> None:
    folder.mkdir(parents=True, exist_ok=True)
    for article in articles:
        (folder / f"{article.id}.md").write_text(article_text(article), encoding="utf-8")
