"""Fencing: the first statement of every transaction that commits a run's work.

`cs_fence` (app/db/sql/20_leases.sql) checks that the thread's lease still carries the
run's generation and id, locks the lease row until the transaction ends (a competing claim
waits for the commit instead of slipping in before it) and renews the lease once a third of
its TTL has gone by. When the check fails, Postgres aborts the transaction, so nothing of it
commits.
"""

from __future__ import annotations

from typing import Any

import psycopg
from psycopg import AsyncConnection, AsyncCursor

from app.fencing import Lease, LeaseLost
from app.turn import current_lease

FENCE_SQL = "SELECT cs_fence(%s, %s, %s, %s)"
LEASE_LOST_SQLSTATE = "CSL01"


def fence_params(lease: Lease) -> tuple[str, int, str, int]:
    return (lease.thread_id, lease.generation, lease.run_id, lease.ttl_ms)


def is_lease_lost(error: BaseException) -> bool:
    return isinstance(error, psycopg.Error) and error.sqlstate == LEASE_LOST_SQLSTATE


async def fence(conn: AsyncConnection[Any] | AsyncCursor[Any]) -> None:
    """Fence the transaction `conn` is in with the current run's lease; nothing outside a
    run (the CLI, tests that drive a graph directly)."""
    lease = current_lease()
    if lease is None:
        return
    try:
        await conn.execute(FENCE_SQL, fence_params(lease))
    except psycopg.Error as error:
        if is_lease_lost(error):
            raise LeaseLost(lease.thread_id) from None
        raise
