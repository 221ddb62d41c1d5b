"""The thread index as the Platform searches it: each thread with its metadata, whether a
run holds it and how its last run ended (parametrised SQL over `threads`, `runs`,
`thread_leases`). A metadata filter is containment (`metadata @> filter`, GIN-indexed)."""

from __future__ import annotations

from collections.abc import Sequence
from typing import Any, Literal

from psycopg import sql
from psycopg.types.json import Jsonb
from psycopg_pool import AsyncConnectionPool

SortBy = Literal["thread_id", "status", "created_at", "updated_at"]

_THREADS = """
SELECT t.thread_id, t.session_id, t.created_at, t.updated_at, t.metadata,
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
_SORT: dict[str, sql.Composable] = {
    "thread_id": sql.Identifier("session_id"),
    "status": sql.SQL(_STATUS),
    "created_at": sql.Identifier("created_at"),
    "updated_at": sql.Identifier("updated_at"),
}


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


def _filtered(session_ids: Sequence[str] | None, metadata: dict[str, Any]) -> sql.Composable:
    """The caller's threads (by ids, by metadata) with the status filter."""
    where = [sql.SQL(_THREADS)]
    if session_ids is not None:
        where.append(sql.SQL(" AND t.session_id = ANY(%(ids)s)"))
    if metadata:
        where.append(sql.SQL(" AND t.metadata @> %(metadata)s"))
    return sql.SQL(
        "SELECT * FROM ({threads}) s WHERE %(status)s::text IS NULL OR {status} = %(status)s"
    ).format(threads=sql.Composed(where), status=sql.SQL(_STATUS))


def _params(
    user_id: str, session_ids: Sequence[str] | None, metadata: dict[str, Any], status: str | None
) -> dict[str, Any]:
    return {
        "user_id": user_id,
        "ids": list(session_ids or []),
        "metadata": Jsonb(metadata),
        "status": status,
    }


async def search_threads(
    pool: AsyncConnectionPool[Any],
    user_id: str,
    *,
    session_ids: Sequence[str] | None,
    metadata: dict[str, Any],
    status: str | None,
    sort_by: SortBy,
    descending: bool,
    limit: int,
    offset: int,
) -> list[dict[str, Any]]:
    query = sql.SQL(
        "{filtered} ORDER BY {column} {direction}, session_id {direction}"
        " LIMIT %(limit)s OFFSET %(offset)s"
    ).format(
        filtered=_filtered(session_ids, metadata),
        column=_SORT[sort_by],
        direction=sql.SQL("DESC" if descending else "ASC"),
    )
    params = {
        **_params(user_id, session_ids, metadata, status),
        "limit": limit,
        "offset": offset,
    }
    async with pool.connection() as conn:
        cur = await conn.execute(query, params)
        rows: list[dict[str, Any]] = await cur.fetchall()
        return rows


async def count_threads(
    pool: AsyncConnectionPool[Any], user_id: str, *, metadata: dict[str, Any], status: str | None
) -> int:
    query = sql.SQL("SELECT count(*) AS n FROM ({filtered}) c").format(
        filtered=_filtered(None, metadata)
    )
    async with pool.connection() as conn:
        cur = await conn.execute(query, _params(user_id, None, metadata, status))
        row = await cur.fetchone()
        return int(row["n"]) if row else 0
