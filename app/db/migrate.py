"""Apply migrations (Alembic, plain SQL) and the LangGraph checkpointer's own setup."""

from __future__ import annotations

import asyncio
import functools
from pathlib import Path
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

MIGRATIONS_DIR = Path(__file__).resolve().parents[2] / "migrations"


def alembic_config(url: str) -> Config:
    cfg = Config()
    cfg.set_main_option("script_location", str(MIGRATIONS_DIR))
    cfg.set_main_option("sqlalchemy.url", sqlalchemy_url(url).replace("%", "%%"))
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


SETUP_LOCK_KEY = 727_002
LOCK_POLL_S = 0.2
LOCK_POLLS = 1500  # five minutes


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
        # Polled, not waited on: see migrations/env.py (CREATE INDEX CONCURRENTLY).
        await _lock_polling(conn, SETUP_LOCK_KEY)
        try:
            await AsyncPostgresSaver(conn).setup()
            await AsyncPostgresStore(conn).setup()
        finally:
            await conn.execute("SELECT pg_advisory_unlock(%s)", (SETUP_LOCK_KEY,))


async def migrate(url: str) -> None:
    upgrade_domain(url)
    await setup_langgraph(url)
