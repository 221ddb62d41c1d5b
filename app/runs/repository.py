"""The thread index and run records (tables `threads`, `runs`). Parametrised SQL only."""

from __future__ import annotations

from datetime import datetime
from typing import Any

from psycopg.types.json import Jsonb
from psycopg_pool import AsyncConnectionPool


class RunRepository:
    def __init__(self, pool: AsyncConnectionPool[Any]) -> None:
        self.pool = pool

    async def create_thread(self, thread_id: str, user_id: str, session_id: str) -> datetime:
        async with self.pool.connection() as conn:
            cur = await conn.execute(
                """INSERT INTO threads (thread_id, user_id, session_id) VALUES (%s, %s, %s)
                   ON CONFLICT (thread_id) DO UPDATE SET thread_id = EXCLUDED.thread_id
                   RETURNING created_at""",
                (thread_id, user_id, session_id),
            )
            row = await cur.fetchone()
            assert row is not None
            created: datetime = row["created_at"]
            return created

    async def thread(self, thread_id: str) -> dict[str, Any] | None:
        async with self.pool.connection() as conn:
            cur = await conn.execute("SELECT * FROM threads WHERE thread_id = %s", (thread_id,))
            row: dict[str, Any] | None = await cur.fetchone()
            return row

    async def list_threads(
        self, user_id: str, limit: int, after: tuple[datetime, str] | None
    ) -> list[dict[str, Any]]:
        sql = "SELECT * FROM threads WHERE user_id = %s"
        params: list[Any] = [user_id]
        if after is not None:
            sql += " AND (updated_at, session_id) < (%s, %s)"
            params += [after[0], after[1]]
        sql += " ORDER BY updated_at DESC, session_id DESC LIMIT %s"
        params.append(limit)
        async with self.pool.connection() as conn:
            cur = await conn.execute(sql, params)
            rows: list[dict[str, Any]] = await cur.fetchall()
            return rows

    async def touch_thread(self, thread_id: str, *, title: str | None, added: int) -> None:
        """Record activity: `added` messages joined the transcript (summaries never remove
        from it, so the count only grows; a rewind sets it with `set_message_count`)."""
        async with self.pool.connection() as conn:
            await conn.execute(
                """UPDATE threads SET updated_at = now(), message_count = message_count + %s,
                          title = CASE WHEN title = '' THEN coalesce(%s, '') ELSE title END
                   WHERE thread_id = %s""",
                (added, title, thread_id),
            )

    async def set_message_count(self, thread_id: str, count: int) -> None:
        async with self.pool.connection() as conn:
            await conn.execute(
                "UPDATE threads SET updated_at = now(), message_count = %s WHERE thread_id = %s",
                (count, thread_id),
            )

    async def latest_checkpoint_id(self, thread_id: str) -> str | None:
        async with self.pool.connection() as conn:
            cur = await conn.execute(
                """SELECT checkpoint_id FROM checkpoints
                   WHERE thread_id = %s AND checkpoint_ns = ''
                   ORDER BY checkpoint_id DESC LIMIT 1""",
                (thread_id,),
            )
            row = await cur.fetchone()
            return str(row["checkpoint_id"]) if row else None

    async def delete_thread(self, thread_id: str) -> None:
        async with self.pool.connection() as conn, conn.transaction():
            await conn.execute("DELETE FROM runs WHERE thread_id = %s", (thread_id,))
            await conn.execute("DELETE FROM threads WHERE thread_id = %s", (thread_id,))

    async def start_run(self, run_id: str, thread_id: str, client_message_id: str | None) -> bool:
        """Record a new run; False when this client_message_id already has one."""
        async with self.pool.connection() as conn:
            cur = await conn.execute(
                """INSERT INTO runs (run_id, thread_id, client_message_id, status)
                   VALUES (%s, %s, %s, 'running')
                   ON CONFLICT (thread_id, client_message_id) DO NOTHING RETURNING run_id""",
                (run_id, thread_id, client_message_id),
            )
            return await cur.fetchone() is not None

    async def run_for_client_message(
        self, thread_id: str, client_message_id: str
    ) -> dict[str, Any] | None:
        async with self.pool.connection() as conn:
            cur = await conn.execute(
                "SELECT * FROM runs WHERE thread_id = %s AND client_message_id = %s",
                (thread_id, client_message_id),
            )
            row: dict[str, Any] | None = await cur.fetchone()
            return row

    async def finish_run(self, run_id: str, status: str, result: dict[str, Any] | None) -> None:
        async with self.pool.connection() as conn:
            await conn.execute(
                "UPDATE runs SET status = %s, result = %s, finished_at = now() WHERE run_id = %s",
                (status, Jsonb(result) if result is not None else None, run_id),
            )

    async def forget_run(self, run_id: str) -> None:
        async with self.pool.connection() as conn:
            await conn.execute("DELETE FROM runs WHERE run_id = %s", (run_id,))
