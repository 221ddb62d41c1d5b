"""One writer per thread, across processes: Postgres session advisory locks.

All of a process's thread locks live on ONE dedicated connection, so 500 concurrent runs
do not need 500 connections. Advisory locks are re-entrant within a session, so the
in-process set is what stops two runs of this process; the lock stops other processes.
If the process dies, its connection closes and Postgres releases every lock it held.

If only the connection dies, Postgres releases the locks as well, while this process's runs
go on. The next lock operation notices, opens a new connection and first takes every lock
the process still holds again, so neither another process nor this one starts a second
writer on those threads. (Between the loss and that operation, another process could take
one; a lock it then finds taken is logged as an error.)
"""

from __future__ import annotations

import asyncio
from typing import Any

import psycopg
import structlog
from psycopg import AsyncConnection

log = structlog.get_logger(__name__)


async def _first_value(conn: AsyncConnection[Any], sql: str, thread_id: str) -> Any:
    cur = await conn.execute(sql, (thread_id,))
    row = await cur.fetchone()
    return row[0] if row else None


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
            await self.open()
            assert self._conn is not None
            if self._held:  # the old session's locks died with it: take them again
                cur = await self._conn.execute(
                    "SELECT t FROM unnest(%s::text[]) AS t"
                    " WHERE NOT pg_try_advisory_lock(hashtextextended(t, 0))",
                    (sorted(self._held),),
                )
                for (thread_id,) in await cur.fetchall():
                    log.error("thread lock taken elsewhere while reconnecting", thread_id=thread_id)
        assert self._conn is not None
        return self._conn

    async def _lock_query(self, sql: str, thread_id: str) -> Any:
        """One statement on the lock connection. A connection found dead is replaced (see
        the module's docstring) and the statement tried once more."""
        conn = await self._connection()
        try:
            return await _first_value(conn, sql, thread_id)
        except psycopg.OperationalError:
            if not conn.closed:
                raise
        return await _first_value(await self._connection(), sql, thread_id)

    async def try_acquire(self, thread_id: str) -> bool:
        async with self._mutex:
            if thread_id in self._held:
                return False
            taken = await self._lock_query(
                "SELECT pg_try_advisory_lock(hashtextextended(%s, 0))", thread_id
            )
            if not taken:
                return False
            self._held.add(thread_id)
            return True

    async def release(self, thread_id: str) -> None:
        async with self._mutex:
            if thread_id not in self._held:
                return
            self._held.discard(thread_id)
            try:
                await self._lock_query(
                    "SELECT pg_advisory_unlock(hashtextextended(%s, 0))", thread_id
                )
            except Exception:
                log.exception("could not release thread lock", thread_id=thread_id)

    def is_held(self, thread_id: str) -> bool:
        return thread_id in self._held
