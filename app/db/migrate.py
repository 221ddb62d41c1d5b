"""Apply migrations (Alembic, plain SQL), the LangGraph checkpointer's own setup, and the
service's SQL functions.

The migrations ship inside the package (`app/migrations/`, package data), so a wheel
install finds them through importlib.resources, with no source tree beside it. They keep
tables, indexes and the drops a function's new signature needs; every live function and
trigger has one source, `app/db/sql/*.sql` (CREATE OR REPLACE), applied after Alembic
reaches head, and again whenever those files change (their hash is stored).
"""

from __future__ import annotations

import asyncio
import functools
import hashlib
from importlib.resources import files
from typing import Any

from alembic import command
from alembic.config import Config
from alembic.runtime.migration import MigrationContext
from alembic.script import ScriptDirectory
from langgraph.checkpoint.postgres.aio import AsyncPostgresSaver
from langgraph.checkpoint.postgres.base import SELECT_SQL
from langgraph.store.postgres.aio import AsyncPostgresStore
from psycopg import AsyncConnection
from psycopg.rows import dict_row
from sqlalchemy import create_engine

from app.db import lock_keys
from app.db.pool import sqlalchemy_url

SETUP_LOCK_KEY = lock_keys.SETUP
FUNCTIONS_LOCK_KEY = lock_keys.FUNCTIONS
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
        and row["functions"] == functions_version()
    )


_VERSIONS_PRESENT = """SELECT to_regclass('alembic_version') IS NOT NULL
    AND to_regclass('checkpoint_migrations') IS NOT NULL
    AND to_regclass('store_migrations') IS NOT NULL
    AND to_regclass('cs_functions') IS NOT NULL AS ok"""
_VERSIONS = """SELECT (SELECT version_num FROM alembic_version LIMIT 1) AS domain,
    (SELECT max(v) FROM checkpoint_migrations) AS checkpoints,
    (SELECT max(v) FROM store_migrations) AS store,
    (SELECT version FROM cs_functions LIMIT 1) AS functions"""


@functools.cache
def function_sql() -> str:
    """Every `app/db/sql/*.sql`, in name order, with upstream's checkpoint query in place."""
    folder = files("app.db").joinpath("sql")
    texts = [f.read_text() for f in sorted(folder.iterdir(), key=lambda f: f.name)]
    sql = "\n".join(t for t in texts if t.strip())
    return sql.replace("{upstream_checkpoint_select}", SELECT_SQL)


def functions_version() -> str:
    return hashlib.sha256(function_sql().encode()).hexdigest()[:16]


async def apply_functions(url: str) -> None:
    """(Re)create every function and trigger in one transaction, one process at a time (two
    CREATE OR REPLACE of one function at once fail), and store their version."""
    async with await AsyncConnection.connect(url, autocommit=True) as conn, conn.transaction():
        await conn.execute("SELECT pg_advisory_xact_lock(%s)", (FUNCTIONS_LOCK_KEY,))
        await conn.execute(function_sql().encode())  # no parameters: `%` stays as it is
        await conn.execute("CREATE TABLE IF NOT EXISTS cs_functions (version text NOT NULL)")
        await conn.execute("DELETE FROM cs_functions")
        await conn.execute("INSERT INTO cs_functions (version) VALUES (%s)", (functions_version(),))


async def migrate(url: str) -> None:
    if await at_head(url):
        return
    upgrade_domain(url)
    await setup_langgraph(url)
    await apply_functions(url)
