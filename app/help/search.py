"""Full-text search over the help articles, best match first, each with a short snippet.

Two passes over the `search` column (see migration 0003):

1. English: the query's stemmed words (`plainto_tsquery`), matched with OR, so an article
   missing one word is still found. The score is `ts_rank_cd` times the share of the words
   the article holds: ranking by that share first let one incidental word ("get") outrank
   the article about the question.
2. Only when that finds nothing (partial words, ids): every word of the query that is not a
   stop word, as a prefix of the articles' unstemmed words, so `refun` finds "refunds".
   No trigrams, so a misspelling still finds nothing.
"""

from __future__ import annotations

import re
from dataclasses import dataclass
from typing import Any

from psycopg import AsyncConnection
from psycopg.rows import dict_row
from psycopg_pool import AsyncConnectionPool

MAX_SNIPPET_CHARS = 300
MAX_QUERY_CHARS = 300
MAX_RESULTS = 10
MAX_PREFIX_WORDS = 8
_HEADLINE = (
    'MaxWords=28, MinWords=12, ShortWord=2, MaxFragments=2, FragmentDelimiter=" … ", '
    'StartSel="", StopSel=""'
)
_WORD_RE = re.compile(r"[0-9a-z]+")

_ENGLISH_UNITS = """
SELECT coalesce(array_remove(string_to_array(plainto_tsquery('english', %s)::text, ' & '), ''),
                '{}') AS units
"""
# Words the English configuration keeps (not stop words), to use as prefixes.
_PREFIX_WORDS = """
SELECT array(SELECT w FROM unnest(%s::text[]) AS w
             WHERE numnode(plainto_tsquery('english', w)) > 0) AS words
"""
# `units` are tsquery texts: lexemes, or phrases of them. `any` matches an article holding at
# least one; the score scales its rank by the share of units it holds.
_SEARCH = """
WITH units AS (SELECT unnest(%(units)s::text[])::tsquery AS unit),
     q AS (SELECT array_to_string(array(SELECT '(' || unit::text || ')' FROM units), ' | ')
                  ::tsquery AS any,
                  (SELECT count(*) FROM units) AS n)
SELECT id, title, ts_headline(%(config)s::regconfig, body, q.any, %(headline)s) AS snippet
FROM (
    SELECT a.id, a.title, a.body,
           ts_rank_cd(a.search, q.any)
             * (SELECT count(*) FROM units WHERE a.search @@ units.unit) / q.n AS score
    FROM help_articles a, q
    WHERE a.search @@ q.any
    ORDER BY score DESC, a.id
    LIMIT %(limit)s
) AS best, q
ORDER BY score DESC, id
"""


@dataclass(frozen=True)
class HelpHit:
    id: str
    title: str
    snippet: str  # plain text, at most MAX_SNIPPET_CHARS


async def search_help(
    pool: AsyncConnectionPool[Any], query: str, max_results: int = 5
) -> list[HelpHit]:
    """Articles matching `query`, best first; [] when nothing matches or the query is empty."""
    query = query[:MAX_QUERY_CHARS]
    limit = max(1, min(max_results, MAX_RESULTS))
    async with pool.connection() as conn:
        units = await _scalar(conn, _ENGLISH_UNITS, (query,))
        hits = await _search(conn, units, "english", limit) if units else []
        if not hits:
            words = list(dict.fromkeys(_WORD_RE.findall(query.lower())))[:MAX_PREFIX_WORDS]
            kept = await _scalar(conn, _PREFIX_WORDS, (words,)) if words else []
            hits = await _search(conn, [f"'{w}':*" for w in kept], "simple", limit)
    return hits


async def _scalar(conn: AsyncConnection[Any], sql: str, params: tuple[Any, ...]) -> list[str]:
    async with conn.cursor(row_factory=dict_row) as cur:
        await cur.execute(sql, params)
        row = await cur.fetchone()
    assert row is not None
    return list(next(iter(row.values())))


async def _search(
    conn: AsyncConnection[Any], units: list[str], config: str, limit: int
) -> list[HelpHit]:
    if not units:
        return []
    params = {"units": units, "config": config, "headline": _HEADLINE, "limit": limit}
    async with conn.cursor(row_factory=dict_row) as cur:
        await cur.execute(_SEARCH, params)
        rows = await cur.fetchall()
    return [HelpHit(r["id"], r["title"], clip_snippet(r["snippet"])) for r in rows]


def clip_snippet(text: str, limit: int = MAX_SNIPPET_CHARS) -> str:
    """One line of at most `limit` characters, cut at a word with "…" when it was longer."""
    flat = " ".join(text.split())
    if len(flat) <= limit:
        return flat
    cut = flat[: limit - 1]
    if " " in cut[limit // 2 :]:
        cut = cut[: cut.rindex(" ")]
    return cut.rstrip(" ,;:.-–") + "…"
