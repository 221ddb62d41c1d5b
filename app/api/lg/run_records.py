"""A Platform run's record: what `runs` keeps for it, with what the Platform adds (the
client's metadata, the webhook URL), set by one UPDATE only for a run that asked for
either (parametrised SQL over `runs`, `run_event_chunks`)."""

from __future__ import annotations

from typing import Any

from psycopg.types.json import Jsonb
from psycopg_pool import AsyncConnectionPool

_FIELDS = "run_id, status, created_at, finished_at, metadata"
# The first `error` of a run's stored log ([seq, "error", {code, message}]).
_ERROR = """(SELECT e.rec->2 FROM run_event_chunks c,
                    jsonb_array_elements(c.events) AS e(rec)
             WHERE c.run_id = runs.run_id AND e.rec->>1 = 'error'
             ORDER BY c.first_seq LIMIT 1) AS error"""
_RECORD = f"SELECT {_FIELDS} FROM runs WHERE thread_id = %s AND run_id = %s"
_RECORD_WITH_ERROR = f"SELECT {_FIELDS}, {_ERROR} FROM runs WHERE thread_id = %s AND run_id = %s"
_RECORDS = f"""SELECT {_FIELDS} FROM runs WHERE thread_id = %s
               ORDER BY created_at DESC LIMIT %s OFFSET %s"""


async def annotate_run(
    pool: AsyncConnectionPool[Any],
    run_id: str,
    *,
    webhook: str | None,
    metadata: dict[str, Any] | None,
    options: dict[str, Any],
) -> None:
    """Store what the run asked for, for a join on any worker or replica. A webhook on a
    run that has ended by now (an instant one may) is enqueued by this same UPDATE (the
    trigger of migration 0020)."""
    async with pool.connection() as conn:
        await conn.execute(
            "UPDATE runs SET webhook = %s, metadata = %s, lg_options = %s WHERE run_id = %s",
            (webhook, Jsonb(metadata) if metadata else None, Jsonb(options), run_id),
        )


async def run_options(pool: AsyncConnectionPool[Any], run_id: str) -> dict[str, Any] | None:
    """What a Platform client asked of the run when it started it (None: none was)."""
    async with pool.connection() as conn:
        cur = await conn.execute("SELECT lg_options FROM runs WHERE run_id = %s", (run_id,))
        row = await cur.fetchone()
    options = row["lg_options"] if row else None
    return options if isinstance(options, dict) else None


async def run_record(
    pool: AsyncConnectionPool[Any], thread_id: str, run_id: str, *, with_error: bool = False
) -> dict[str, Any] | None:
    async with pool.connection() as conn:
        cur = await conn.execute(_RECORD_WITH_ERROR if with_error else _RECORD, (thread_id, run_id))
        row: dict[str, Any] | None = await cur.fetchone()
        return row


async def run_records(
    pool: AsyncConnectionPool[Any], thread_id: str, limit: int, offset: int
) -> list[dict[str, Any]]:
    async with pool.connection() as conn:
        cur = await conn.execute(_RECORDS, (thread_id, limit, offset))
        rows: list[dict[str, Any]] = await cur.fetchall()
        return rows
