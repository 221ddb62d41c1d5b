"""Full-text search over the help articles, best match first, each with a short snippet.

Two passes over the `search` column (see migration 0003):

1. English: the query's stemmed words (`plainto_tsquery`), matched with OR. Articles are
   ranked by how many of the words they contain, then by `ts_rank_cd`, so an article holding
   every word comes first but one missing a word is still found.
2. Only when that finds nothing (misspellings aside, mostly partial words and ids): every
   word of the query as a prefix of the unstemmed words, `refun` finding "refunds".
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
# `units` are tsquery texts: lexemes, or phrases of them. An article's coverage is how many
# units it matches; `any` matches an article holding at least one.
_SEARCH = """
WITH units AS (SELECT unnest(%(units)s::text[])::tsquery AS unit),
     q AS (SELECT array_to_string(array(SELECT '(' || unit::text || ')' FROM units), ' | ')
                  ::tsquery AS any)
SELECT id, title, ts_headline(%(config)s::regconfig, body, q.any, %(headline)s) AS snippet
FROM (
    SELECT a.id, a.title, a.body,
           (SELECT count(*) FROM units WHERE a.search @@ units.unit) AS coverage,
           ts_rank_cd(a.search, q.any) AS rank
    FROM help_articles a, q
    WHERE a.search @@ q.any
    ORDER BY coverage DESC, rank DESC, a.id
    LIMIT %(limit)s
) AS best, q
ORDER BY coverage DESC, rank DESC, id
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
