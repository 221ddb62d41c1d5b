"""One writer per thread, across processes: Postgres session advisory locks.

All of a process's thread locks live on ONE dedicated connection, so 500 concurrent runs
do not need 500 connections. Advisory locks are re-entrant within a session, so the
in-process set is what stops two runs of this process; the lock stops other processes.
If the process dies, its connection closes and Postgres releases every lock it held.
"""

from __future__ import annotations

import asyncio
from typing import Any

import structlog
from psycopg import AsyncConnection

log = structlog.get_logger(__name__)


class ThreadLocks:
    def __init__(self, url: str) -> None:
        self._url = url
        self._conn: AsyncConnection[Any] | None = None
        self._held: set[str] = set()
        self._mutex = asyncio.Lock()

    async def open(self) -> None:
        self._conn = await AsyncConnection.connect(self._url, autocommit=True)

    async def close(self) -> None:
        if self._conn is not None:
            await self._conn.close()
            self._conn = None

    async def _connection(self) -> AsyncConnection[Any]:
        if self._conn is None or self._conn.closed:
            log.warning("thread lock connection lost; reconnecting")
            self._held.clear()  # the old session's locks died with it
            await self.open()
        assert self._conn is not None
        return self._conn

    async def try_acquire(self, thread_id: str) -> bool:
        async with self._mutex:
            if thread_id in self._held:
                return False
            conn = await self._connection()
            cur = await conn.execute(
                "SELECT pg_try_advisory_lock(hashtextextended(%s, 0))", (thread_id,)
            )
            row = await cur.fetchone()
            if row is None or not row[0]:
                return False
            self._held.add(thread_id)
            return True

    async def release(self, thread_id: str) -> None:
        async with self._mutex:
            if thread_id not in self._held:
                return
            self._held.discard(thread_id)
            try:
                conn = await self._connection()
                await conn.execute(
                    "SELECT pg_advisory_unlock(hashtextextended(%s, 0))", (thread_id,)
                )
            except Exception:
                log.exception("could not release thread lock", thread_id=thread_id)

    def is_held(self, thread_id: str) -> bool:
        return thread_id in self._held
