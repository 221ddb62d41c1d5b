"""One consistent snapshot for the read tools' multi-statement reads."""

from __future__ import annotations

import contextlib
from collections.abc import AsyncIterator
from contextlib import asynccontextmanager
from typing import Any

import psycopg
from psycopg import AsyncConnection
from psycopg.pq import TransactionStatus
from psycopg_pool import AsyncConnectionPool

BEGIN = "BEGIN ISOLATION LEVEL REPEATABLE READ, READ ONLY"


@asynccontextmanager
async def read_snapshot(pool: AsyncConnectionPool[Any]) -> AsyncIterator[AsyncConnection[Any]]:
    """A pooled connection inside a read-only REPEATABLE READ transaction, so an order and its
    items, fulfillments and payments are read as of one moment (never half of a write).

    In pipeline mode: statements go out as they are issued and wait only when a result is
    read, so BEGIN and the queries issued before the first read share one round trip, and
    the COMMIT rides on the pipeline's closing sync. BEGIN and COMMIT are plain statements
    (the pool's connections are autocommit): psycopg's `transaction()` syncs on its exit
    and the pipeline syncs again, two round trips where one does (~0.5 ms of CPU less
    a snapshot, measured on this machine)."""
    async with pool.connection() as conn:
        try:
            async with conn.pipeline():
                await conn.execute(BEGIN)
                yield conn
                await conn.execute("COMMIT")
        except BaseException:
            # a failed read leaves the transaction open or aborted: never hand it back so
            if conn.pgconn.transaction_status in (
                TransactionStatus.INTRANS,
                TransactionStatus.INERROR,
            ):
                with contextlib.suppress(psycopg.Error):  # a dead connection: the pool drops it
                    await conn.rollback()
            raise
