"""What one writer per thread costs a turn: the lease claim, its release and the fence in
each store, against the session advisory lock they replaced.

    .venv/bin/python -m benchmarks.lease_cost [--n 2000]

Runs on a fresh database of the machine's Postgres (DEFAULT_ADMIN_URL), one connection at a
time, so the figures are round trips plus server work, not contention. Prints a table.
"""

from __future__ import annotations

import argparse
import asyncio
import time
import uuid
from collections.abc import Awaitable, Callable
from typing import Any

from psycopg_pool import AsyncConnectionPool

from app.config import Settings
from app.db.leases import FENCE_SQL, fence_params
from app.db.migrate import migrate
from app.db.pool import open_pool
from app.runs.leases import ThreadLeases
from tests.pg import create_fresh_database, drop_database


async def timed(n: int, step: Callable[[int], Awaitable[Any]]) -> float:
    """Microseconds per call, median of three passes of `n`."""
    passes = []
    for _ in range(3):
        started = time.perf_counter()
        for i in range(n):
            await step(i)
        passes.append((time.perf_counter() - started) / n * 1e6)
    return sorted(passes)[1]


async def measure(pool: AsyncConnectionPool[Any], n: int) -> list[tuple[str, float]]:
    leases = ThreadLeases(pool, ttl_s=15)
    threads = [f"u:{uuid.uuid4().hex}" for _ in range(n)]

    async def advisory(i: int) -> None:
        async with pool.connection() as conn:
            await conn.execute(
                "SELECT pg_try_advisory_lock(hashtextextended(%s, 0))", (threads[i],)
            )
        async with pool.connection() as conn:
            await conn.execute("SELECT pg_advisory_unlock(hashtextextended(%s, 0))", (threads[i],))

    async def lease(i: int) -> None:
        claim = await leases.claim(threads[i], f"run-{i}")
        assert claim is not None
        await leases.release(claim.lease)

    rows = b"x" * 2000  # about one checkpoint's JSON
    async with pool.connection() as conn:
        await conn.execute("CREATE TABLE bench_rows (id bigserial PRIMARY KEY, data bytea)")

    async def store(i: int) -> None:
        """A read-only turn's store before: three statements in one pipeline, autocommit."""
        async with pool.connection() as conn, conn.pipeline(), conn.cursor() as cur:
            for _ in range(3):
                await cur.executemany("INSERT INTO bench_rows (data) VALUES (%s)", [(rows,)] * 2)

    held = await leases.claim(f"u:{uuid.uuid4().hex}", "fenced")
    assert held is not None

    async def fenced_store(i: int) -> None:
        """The same store now: fenced, one transaction, still one pipeline."""
        async with (
            pool.connection() as conn,
            conn.pipeline(),
            conn.cursor() as cur,
            conn.transaction(),
        ):
            await cur.execute(FENCE_SQL, fence_params(held.lease))
            for _ in range(3):
                await cur.executemany("INSERT INTO bench_rows (data) VALUES (%s)", [(rows,)] * 2)

    return [
        ("advisory lock + unlock (before)", await timed(n, advisory)),
        ("lease claim + release (now)", await timed(n, lease)),
        ("a store: 3 statements, one pipeline, autocommit (before)", await timed(n, store)),
        ("the same store fenced, in one transaction (now)", await timed(n, fenced_store)),
    ]


async def main(n: int) -> None:
    url, admin = create_fresh_database()
    try:
        await migrate(url)
        settings = Settings(database_url=url, _env_file=None)
        pool = await open_pool(url, settings, name="lease-cost")
        try:
            results = await measure(pool, n)
        finally:
            await pool.close()
    finally:
        drop_database(admin, url)
    print("| step | µs a call |\n|---|---:|")
    for name, us in results:
        print(f"| {name} | {us:,.0f} |")


if __name__ == "__main__":
    parser = argparse.ArgumentParser(description=__doc__)
    parser.add_argument("--n", type=int, default=2000)
    asyncio.run(main(parser.parse_args().n))
