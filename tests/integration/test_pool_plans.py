"""The service's pools run prepared statements on their generic plan (app/db/pool.py): no
planning on every call. Postgres counts each prepared statement's plans per connection in
`pg_prepared_statements` (generic_plans, custom_plans; PostgreSQL 14 and later)."""

from __future__ import annotations

import asyncio
from collections.abc import AsyncIterator
from datetime import UTC, datetime, timedelta
from typing import Any

import psycopg
import pytest
from psycopg import AsyncConnection
from psycopg_pool import AsyncConnectionPool

from app.analytics import report
from app.config import Settings
from app.db.pool import ServicePool, open_pool

# A keyed lookup like most of a turn's statements; psycopg prepares it on its 5th run.
LOOKUP = "SELECT status FROM runs WHERE run_id = %s"
RUNS = 12


async def plans(conn: AsyncConnection[Any]) -> dict[str, int]:
    cur = await conn.execute(
        "SELECT generic_plans AS generic, custom_plans AS custom FROM pg_prepared_statements"
        " WHERE statement LIKE 'SELECT status FROM runs WHERE run_id = $1%%'"
    )
    row = await cur.fetchone()
    return {"generic": 0, "custom": 0} if row is None else dict(row)


async def run_lookups(conn: AsyncConnection[Any]) -> None:
    for i in range(RUNS):
        await conn.execute(LOOKUP, (f"no-such-run-{i}",))


async def test_prepared_statements_are_not_planned_per_call(
    pool: AsyncConnectionPool[Any],
) -> None:
    async with pool.connection() as conn:
        cur = await conn.execute("SHOW plan_cache_mode")
        assert (await cur.fetchone())["plan_cache_mode"] == "force_generic_plan"
        await run_lookups(conn)
        counted = await plans(conn)
    assert counted["generic"] >= RUNS - 5
    assert counted["custom"] == 0


async def test_without_prepared_statements_the_server_default_stays(
    database_url: str,
) -> None:
    # PgBouncer in transaction mode: nothing prepared, and no session setting is made.
    settings = Settings(  # type: ignore[call-arg]
        database_url=database_url, db_prepare_threshold=None, db_pool_min=1, _env_file=None
    )
    pool = await open_pool(database_url, settings, name="test-unprepared")
    try:
        async with pool.connection() as conn:
            cur = await conn.execute("SHOW plan_cache_mode")
            assert (await cur.fetchone())["plan_cache_mode"] == "auto"
            await run_lookups(conn)
            assert await plans(conn) == {"generic": 0, "custom": 0}
    finally:
        await pool.close()


@pytest.fixture
async def one_connection(database_url: str) -> AsyncIterator[ServicePool]:
    """A pool of exactly one connection, prepared statements on: whatever runs, runs on it."""
    settings = Settings(  # type: ignore[call-arg]
        database_url=database_url, db_pool_min=1, db_pool_max=1, _env_file=None
    )
    pool = await open_pool(database_url, settings, name="test-one")
    yield pool
    await pool.close()


async def test_a_connection_that_replaces_a_dropped_one_gets_the_setting(
    one_connection: ServicePool, database_url: str
) -> None:
    async with one_connection.connection() as conn:
        pid = conn.info.backend_pid
    async with await psycopg.AsyncConnection.connect(database_url, autocommit=True) as admin:
        await admin.execute("SELECT pg_terminate_backend(%s)", (pid,))
        for _ in range(100):  # the backend exits after the call returns
            cur = await admin.execute("SELECT 1 FROM pg_stat_activity WHERE pid = %s", (pid,))
            if await cur.fetchone() is None:
                break
            await asyncio.sleep(0.05)
    async with one_connection.connection() as conn:
        assert conn.info.backend_pid != pid
        cur = await conn.execute("SHOW plan_cache_mode")
        assert (await cur.fetchone())["plan_cache_mode"] == "force_generic_plan"


async def test_the_analytics_report_is_planned_for_its_own_range(
    one_connection: ServicePool,
) -> None:
    # Run often enough that psycopg would have prepared its queries (then stuck on one
    # generic plan for any range): they must stay unprepared.
    end = datetime.now(UTC)
    for days in (1, 7, 30, 365, 1, 7, 30, 365):
        await report.summary(one_connection, end - timedelta(days=days), end, "day")
    async with one_connection.connection() as conn:
        cur = await conn.execute(
            "SELECT count(*) AS n FROM pg_prepared_statements"
            " WHERE statement LIKE '%%conversation_outcomes%%'"
        )
        assert (await cur.fetchone())["n"] == 0
