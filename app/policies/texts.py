"""Each version's rules, read from the database once per process.

A version's content never changes (a trigger refuses it), so an entry never goes stale:
what moves is which version a thread is pinned to, and the statement that opens a run
reads that. A publish on another replica therefore reaches this one at its next turn.
"""

from __future__ import annotations

from typing import Any

from psycopg.rows import dict_row
from psycopg_pool import AsyncConnectionPool

from app.errors import NotFound
from app.policies.render import rules_text

MAX_VERSIONS_KEPT = 64


class PolicyTexts:
    def __init__(self, pool: AsyncConnectionPool[Any], size: int = MAX_VERSIONS_KEPT) -> None:
        self._pool = pool
        self._size = size
        self._rules: dict[int, str] = {}
        self.reads = 0  # database reads so far (a test checks a version is read once)

    async def rules(self, version: int) -> str:
        cached = self._rules.get(version)
        if cached is not None:
            return cached
        async with self._pool.connection() as conn, conn.cursor(row_factory=dict_row) as cur:
            await cur.execute(
                "SELECT instructions, procedures FROM policy_versions WHERE version = %s",
                (version,),
            )
            row = await cur.fetchone()
        self.reads += 1
        if row is None:
            raise NotFound(f"no policy version {version}", code="policy_not_found")
        text = rules_text(row["instructions"], row["procedures"] or [])
        if len(self._rules) >= self._size:
            del self._rules[next(iter(self._rules))]
        self._rules[version] = text
        return text
