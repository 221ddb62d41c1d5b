"""The service's pools run prepared statements on their generic plan (app/db/pool.py): no
planning on every call. Postgres counts each prepared statement's plans per connection in
`pg_prepared_statements` (generic_plans, custom_plans; PostgreSQL 14 and later)."""

from __future__ import annotations

from typing import Any

from psycopg import AsyncConnection
from psycopg_pool import AsyncConnectionPool

from app.config import Settings
from app.db.pool import open_pool

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
