"""A transaction in one round trip: BEGIN, its statements and COMMIT in one pipeline."""

from __future__ import annotations

import contextlib
from collections.abc import AsyncIterator
from contextlib import asynccontextmanager
from typing import Any

import psycopg
from psycopg import AsyncConnection
from psycopg.pq import TransactionStatus

UNFINISHED = (TransactionStatus.INTRANS, TransactionStatus.INERROR)


@asynccontextmanager
async def one_round_trip(conn: AsyncConnection[Any], begin: str = "BEGIN") -> AsyncIterator[None]:
    """`conn` (autocommit, as the pool's connections are) in pipeline mode, inside a
    transaction the block's statements join. They go out as they are issued and wait only
    when a result is read, so BEGIN and everything issued before the first read share one
    round trip, and the COMMIT rides on the pipeline's closing sync. BEGIN and COMMIT are
    plain statements: psycopg's `transaction()` inside a pipeline syncs after its BEGIN, at
    its end, on leaving its pipeline block and at the pipeline's end, four round trips where
    one does (about 0.35 ms of client CPU a transaction on this machine).

    An error aborts the rest of the pipeline, COMMIT included: the transaction is rolled
    back before the connection goes back to the pool (never handed back open or aborted),
    and the error raised. A result read after the block was received with the COMMIT."""
    try:
        async with conn.pipeline():
            await conn.execute(begin)
            yield
            await conn.execute("COMMIT")
    except BaseException:
        if conn.pgconn.transaction_status in UNFINISHED:
            with contextlib.suppress(psycopg.Error):  # a dead connection: the pool drops it
                await conn.rollback()
        raise
