"""A transaction in one round trip: BEGIN, its statements and COMMIT in one pipeline."""

from __future__ import annotations

import contextlib
from collections.abc import AsyncIterator
from contextlib import asynccontextmanager
from typing import Any

import psycopg
from psycopg import AsyncConnection
from psycopg.pq import TransactionStatus

from app.db.leases import is_lease_lost
from app.fencing import LeaseLost
from app.turn import current_lease

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

    An error aborts the rest of the pipeline, COMMIT included: see `finished_on_error`."""
    async with finished_on_error(conn), conn.pipeline():
        await conn.execute(begin)
        yield
        await conn.execute("COMMIT")


@asynccontextmanager
async def finished_on_error(conn: AsyncConnection[Any]) -> AsyncIterator[None]:
    """For a block that sends its own BEGIN and COMMIT: on any error, the transaction is
    rolled back before the connection goes back to the pool (never handed back open or
    aborted), and the error raised. A fence that failed inside a pipeline surfaces at the
    next sync as Postgres's error, not from `fence()`: it is raised as LeaseLost here."""
    try:
        yield
    except BaseException as error:
        if conn.pgconn.transaction_status in UNFINISHED:
            with contextlib.suppress(psycopg.Error):  # a dead connection: the pool drops it
                await conn.rollback()
        if is_lease_lost(error):
            lease = current_lease()
            raise LeaseLost(lease.thread_id if lease else "") from None
        raise
