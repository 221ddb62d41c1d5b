"""The transcript archive (table `transcript_archive`): what summaries took out of state."""

from __future__ import annotations

from collections.abc import Sequence
from typing import Any

from langchain_core.messages import BaseMessage
from psycopg.types.json import Jsonb
from psycopg_pool import AsyncConnectionPool

from app.agent.views import message_view


class PgTranscriptArchive:
    def __init__(self, pool: AsyncConnectionPool[Any]) -> None:
        self.pool = pool

    async def append(self, thread_id: str, start: int, messages: Sequence[BaseMessage]) -> None:
        rows = [(thread_id, start + i, Jsonb(message_view(m))) for i, m in enumerate(messages)]
        async with self.pool.connection() as conn, conn.cursor() as cur:
            await cur.executemany(
                """INSERT INTO transcript_archive (thread_id, seq, message) VALUES (%s, %s, %s)
                   ON CONFLICT (thread_id, seq)
                   DO UPDATE SET message = EXCLUDED.message, archived_at = now()""",
                rows,
            )

    async def read(self, thread_id: str, upto: int) -> list[dict[str, Any]]:
        async with self.pool.connection() as conn:
            cur = await conn.execute(
                "SELECT message FROM transcript_archive WHERE thread_id = %s AND seq < %s"
                " ORDER BY seq",
                (thread_id, upto),
            )
            return [r["message"] for r in await cur.fetchall()]
