"""The async psycopg pools. Created by the lifespan or the CLI, never at import time."""

from __future__ import annotations

from typing import Any

from psycopg import AsyncConnection
from psycopg.rows import dict_row
from psycopg_pool import AsyncConnectionPool

from app.config import Settings


def sqlalchemy_url(url: str) -> str:
    for prefix in ("postgresql://", "postgres://"):
        if url.startswith(prefix):
            return "postgresql+psycopg://" + url[len(prefix) :]
    return url


async def open_pool(url: str, settings: Settings, *, name: str) -> AsyncConnectionPool[Any]:
    """Open an autocommit pool of dict-row connections.

    Autocommit because the checkpointer expects it, and because every write path opens its
    own explicit transaction (`async with conn.transaction()`).
    """
    kwargs: dict[str, Any] = {
        "autocommit": True,
        "row_factory": dict_row,
        "prepare_threshold": settings.db_prepare_threshold,
    }
    pool: AsyncConnectionPool[AsyncConnection[Any]] = AsyncConnectionPool(
        url,
        min_size=settings.db_pool_min,
        max_size=settings.db_pool_max,
        kwargs=kwargs,
        name=name,
        open=False,
    )
    await pool.open(wait=True, timeout=30)
    return pool
