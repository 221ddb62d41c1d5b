"""The checkpointer on a pool runs its reads and stores side by side: one that waits (on a
lock, a slow disk, a busy server) holds up no other thread's."""

from __future__ import annotations

import asyncio
from typing import Any

import psycopg
from psycopg_pool import AsyncConnectionPool

from app.db.checkpointer import PostgresCheckpointer
from tests.integration.test_checkpointer import run_to_interrupt, thread_config


async def test_a_read_does_not_wait_for_a_store_that_waits(
    pool: AsyncConnectionPool[Any], database_url: str
) -> None:
    saver = PostgresCheckpointer(pool)
    await run_to_interrupt(saver, "concurrency-read")
    with psycopg.connect(database_url) as blocker:
        blocker.execute("LOCK TABLE checkpoints IN EXCLUSIVE MODE")  # writes wait, reads pass
        store = asyncio.create_task(run_to_interrupt(saver, "concurrency-write"))
        await asyncio.sleep(0.5)
        assert not store.done()  # it waits on the lock
        read = await asyncio.wait_for(saver.aget_tuple(thread_config("concurrency-read")), 5)
        assert read is not None
        blocker.rollback()
    await asyncio.wait_for(store, 10)
