"""The thread index as the Platform searches it: each thread with whether a run holds it
and how its last run ended (parametrised SQL over `threads`, `runs`, `thread_leases`)."""

from __future__ import annotations

from collections.abc import Sequence
from typing import Any, Literal

from psycopg import sql
from psycopg_pool import AsyncConnectionPool

SortBy = Literal["thread_id", "created_at", "updated_at"]
_SORT_COLUMNS: dict[str, str] = {
    "thread_id": "session_id",
    "created_at": "created_at",
    "updated_at": "updated_at",
}

_THREADS = """
SELECT t.thread_id, t.session_id, t.created_at, t.updated_at,
       EXISTS (SELECT 1 FROM thread_leases l
               WHERE l.thread_id = t.thread_id AND l.run_id IS NOT NULL
                 AND l.expires_at > clock_timestamp()) AS busy,
       (SELECT r.status FROM runs r WHERE r.thread_id = t.thread_id
        ORDER BY r.created_at DESC LIMIT 1) AS last_run
FROM threads t WHERE t.user_id = %(user_id)s
"""
# The status the Platform filters on, from the row alone (the state refines `interrupted`:
# a rewind can leave a paused run last while nothing waits any more).
_STATUS = """CASE WHEN busy THEN 'busy' WHEN last_run = 'interrupted' THEN 'interrupted'
    WHEN last_run IN ('failed', 'abandoned') THEN 'error' ELSE 'idle' END"""


async def thread_row(
    pool: AsyncConnectionPool[Any], user_id: str, thread_id: str
) -> dict[str, Any] | None:
    async with pool.connection() as conn:
        cur = await conn.execute(
            _THREADS + " AND t.thread_id = %(thread_id)s",
            {"user_id": user_id, "thread_id": thread_id},
        )
        row: dict[str, Any] | None = await cur.fetchone()
        return row


async def search_threads(
    pool: AsyncConnectionPool[Any],
    user_id: str,
    *,
    session_ids: Sequence[str] | None,
    status: str | None,
    sort_by: SortBy,
    descending: bool,
    limit: int,
    offset: int,
) -> list[dict[str, Any]]:
    where = sql.SQL("")
    if session_ids is not None:
        where = sql.SQL(" AND t.session_id = ANY(%(ids)s)")
    query = sql.SQL(
        "SELECT * FROM ({threads}{where}) s WHERE %(status)s::text IS NULL OR {status} = %(status)s"
        " ORDER BY {column} {direction}, session_id {direction} LIMIT %(limit)s OFFSET %(offset)s"
    ).format(
        threads=sql.SQL(_THREADS),
        where=where,
        status=sql.SQL(_STATUS),
        column=sql.Identifier(_SORT_COLUMNS[sort_by]),
        direction=sql.SQL("DESC" if descending else "ASC"),
    )
    params = {
        "user_id": user_id,
        "ids": list(session_ids or []),
        "status": status,
        "limit": limit,
        "offset": offset,
    }
    async with pool.connection() as conn:
        cur = await conn.execute(query, params)
        rows: list[dict[str, Any]] = await cur.fetchall()
        return rows
