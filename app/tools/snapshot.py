"""One consistent snapshot for the read tools' multi-statement reads."""

from __future__ import annotations

from collections.abc import AsyncIterator
from contextlib import asynccontextmanager
from typing import Any

from psycopg import AsyncConnection
from psycopg_pool import AsyncConnectionPool

from app.db.trips import one_round_trip

BEGIN = "BEGIN ISOLATION LEVEL REPEATABLE READ, READ ONLY"


@asynccontextmanager
async def read_snapshot(pool: AsyncConnectionPool[Any]) -> AsyncIterator[AsyncConnection[Any]]:
    """A pooled connection inside a read-only REPEATABLE READ transaction, so an order and its
    items, fulfillments and payments are read as of one moment (never half of a write). The
    queries issued before the first read share BEGIN's round trip (`one_round_trip`)."""
    async with pool.connection() as conn, one_round_trip(conn, BEGIN):
        yield conn
