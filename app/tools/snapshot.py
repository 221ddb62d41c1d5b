"""One consistent snapshot for the read tools' multi-statement reads."""

from __future__ import annotations

from collections.abc import AsyncIterator
from contextlib import asynccontextmanager
from typing import Any

from psycopg import AsyncConnection
from psycopg_pool import AsyncConnectionPool


@asynccontextmanager
async def read_snapshot(pool: AsyncConnectionPool[Any]) -> AsyncIterator[AsyncConnection[Any]]:
    """A pooled connection inside a read-only REPEATABLE READ transaction, so an order and its
    items, fulfillments and payments are read as of one moment (never half of a write).

    In pipeline mode: statements go out as they are issued and wait only when a result is
    read, so BEGIN, the SET and the queries issued before the first read share one round
    trip (an order lookup: 2 round trips, down from 7)."""
    async with pool.connection() as conn, conn.pipeline(), conn.transaction():
        await conn.execute("SET TRANSACTION ISOLATION LEVEL REPEATABLE READ, READ ONLY")
        yield conn
