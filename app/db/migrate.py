"""Apply migrations (Alembic, plain SQL) and the LangGraph checkpointer's own setup.

The migrations ship inside the package (`app/migrations/`, package data), so a wheel
install finds them through importlib.resources, with no source tree beside it.
"""

from __future__ import annotations

import asyncio
import functools
from typing import Any

from alembic import command
from alembic.config import Config
from alembic.runtime.migration import MigrationContext
from alembic.script import ScriptDirectory
from langgraph.checkpoint.postgres.aio import AsyncPostgresSaver
from langgraph.store.postgres.aio import AsyncPostgresStore
from psycopg import AsyncConnection
from psycopg.rows import dict_row
from sqlalchemy import create_engine

from app.db.pool import sqlalchemy_url

SETUP_LOCK_KEY = 727_002
LOCK_POLL_S = 0.2
LOCK_POLLS = 1500  # five minutes

# Alembic resolves `package:folder` with importlib.resources: the same in a checkout, an
# editable install and a wheel.
MIGRATIONS = "app:migrations"


def alembic_config(url: str) -> Config:
    cfg = Config()
    cfg.set_main_option("script_location", MIGRATIONS)
    cfg.set_main_option("sqlalchemy.url", sqlalchemy_url(url).replace("%", "%%"))
    # env.py reads its lock polling from here rather than importing the app.
    cfg.attributes["lock_poll_s"] = LOCK_POLL_S
    cfg.attributes["lock_polls"] = LOCK_POLLS
    return cfg


def upgrade_domain(url: str) -> None:
    command.upgrade(alembic_config(url), "head")


@functools.cache
def head_revision() -> str | None:
    """Read once per process: /readyz asks on every probe, and the files do not change."""
    script = ScriptDirectory.from_config(alembic_config("postgresql://unused"))
    return script.get_current_head()


def current_revision(url: str) -> str | None:
    engine = create_engine(sqlalchemy_url(url))
    try:
        with engine.connect() as conn:
            return MigrationContext.configure(conn).get_current_revision()
    finally:
        engine.dispose()


async def _try_lock(conn: AsyncConnection[Any], key: int) -> bool:
    cur = await conn.execute("SELECT pg_try_advisory_lock(%s) AS ok", (key,))
    row = await cur.fetchone()
    return bool(row and row["ok"])


async def _lock_polling(conn: AsyncConnection[Any], key: int) -> None:
    for _ in range(LOCK_POLLS):
        if await _try_lock(conn, key):
            return
        await asyncio.sleep(LOCK_POLL_S)
    raise TimeoutError("another replica has held the setup lock for too long")


async def setup_langgraph(url: str) -> None:
    """Create the checkpointer and store tables. Their DDL needs autocommit."""
    async with await AsyncConnection.connect(url, autocommit=True, row_factory=dict_row) as conn:
        # Polled, not waited on: see app/migrations/env.py (CREATE INDEX CONCURRENTLY).
        await _lock_polling(conn, SETUP_LOCK_KEY)
        try:
            await AsyncPostgresSaver(conn).setup()
            await AsyncPostgresStore(conn).setup()
        finally:
            await conn.execute("SELECT pg_advisory_unlock(%s)", (SETUP_LOCK_KEY,))


async def at_head(url: str) -> bool:
    """Whether the domain schema, the checkpointer's and the store's are all current.

    One read, no lock: replicas behind PgBouncer in transaction mode start against a
    database a one-shot `migrate` (connected directly) has brought up to date, and a
    session-level advisory lock taken through a transaction pool could be left held on a
    server connection nobody owns."""
    async with await AsyncConnection.connect(url, autocommit=True, row_factory=dict_row) as conn:
        cur = await conn.execute(_VERSIONS_PRESENT)
        present = await cur.fetchone()
        if not (present and present["ok"]):
            return False
        cur = await conn.execute(_VERSIONS)
        row = await cur.fetchone()
    return bool(
        row
        and row["domain"] == head_revision()
        and row["checkpoints"] == len(AsyncPostgresSaver.MIGRATIONS) - 1
        and row["store"] == len(AsyncPostgresStore.MIGRATIONS) - 1
    )


_VERSIONS_PRESENT = """SELECT to_regclass('alembic_version') IS NOT NULL
    AND to_regclass('checkpoint_migrations') IS NOT NULL
    AND to_regclass('store_migrations') IS NOT NULL AS ok"""
_VERSIONS = """SELECT (SELECT version_num FROM alembic_version LIMIT 1) AS domain,
    (SELECT max(v) FROM checkpoint_migrations) AS checkpoints,
    (SELECT max(v) FROM store_migrations) AS store"""


async def migrate(url: str) -> None:
    if await at_head(url):
        return
    upgrade_domain(url)
    await setup_langgraph(url)
