"""What the commands that need the database start with (app/cli.py, app/cli_policies.py):
settings with a DATABASE_URL, and a small pool for one command."""

from __future__ import annotations

from collections.abc import Awaitable, Callable
from typing import Any

from psycopg_pool import AsyncConnectionPool

from app.config import Settings


def settings_with_database() -> Settings:
    """Settings whose DATABASE_URL is set, starting the embedded server when it was not."""
    from app.db.embedded import database_url

    settings = Settings()
    url = database_url(settings.database_url, settings.data_dir)
    return settings.model_copy(update={"database_url": url})


async def with_pool(
    settings: Settings, work: Callable[[AsyncConnectionPool[Any]], Awaitable[None]]
) -> None:
    """A small pool for one command, closed when `work` is done."""
    from app.db.pool import open_pool

    assert settings.database_url
    pool = await open_pool(
        settings.database_url,
        settings.model_copy(update={"db_pool_min": 1, "db_call_deadline_s": None}),
        name="cli",
    )
    try:
        await work(pool)
    finally:
        await pool.close()
