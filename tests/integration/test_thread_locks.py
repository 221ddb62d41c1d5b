"""`ThreadLocks`: one writer per thread, across processes, through a lost lock connection."""

from __future__ import annotations

import uuid
from collections.abc import AsyncIterator

import psycopg
import pytest

from app.runs.locks import ThreadLocks


@pytest.fixture
async def locks(database_url: str) -> AsyncIterator[ThreadLocks]:
    locks = ThreadLocks(database_url)
    await locks.open()
    yield locks
    await locks.close()


async def taken_elsewhere(database_url: str, thread_id: str) -> bool:
    """Whether another session (another process, say) finds the thread's lock taken."""
    async with await psycopg.AsyncConnection.connect(database_url, autocommit=True) as conn:
        cur = await conn.execute(
            "SELECT pg_try_advisory_lock(hashtextextended(%s, 0))", (thread_id,)
        )
        row = await cur.fetchone()
        assert row is not None
        return not row[0]  # closing the connection gives back a lock it took


async def drop_lock_connection(database_url: str, locks: ThreadLocks) -> None:
    assert locks._conn is not None
    pid = locks._conn.info.backend_pid
    async with await psycopg.AsyncConnection.connect(database_url, autocommit=True) as conn:
        await conn.execute("SELECT pg_terminate_backend(%s)", (pid,))


async def test_a_lock_excludes_this_process_and_others_until_released(
    locks: ThreadLocks, database_url: str
) -> None:
    thread = f"t-{uuid.uuid4().hex}"
    assert await locks.try_acquire(thread)
    assert not await locks.try_acquire(thread)
    assert await taken_elsewhere(database_url, thread)
    await locks.release(thread)
    assert not await taken_elsewhere(database_url, thread)


async def test_locks_held_through_a_lost_connection_are_taken_again(
    locks: ThreadLocks, database_url: str
) -> None:
    """Postgres frees a dead session's locks while this process's runs go on: the next
    lock operation reconnects and takes them again before anything else."""
    running, released, other = (f"t-{uuid.uuid4().hex}" for _ in range(3))
    assert await locks.try_acquire(running)
    assert await locks.try_acquire(released)
    await locks.release(released)

    await drop_lock_connection(database_url, locks)
    assert await locks.try_acquire(other)  # the first operation after the loss succeeds

    assert await taken_elsewhere(database_url, running)  # taken again on the new session
    assert not await locks.try_acquire(running)  # and still refused in this process
    assert not await taken_elsewhere(database_url, released)  # not resurrected
    await locks.release(running)
    assert not await taken_elsewhere(database_url, running)


async def test_a_release_after_a_lost_connection_frees_the_lock(
    locks: ThreadLocks, database_url: str
) -> None:
    running, done = (f"t-{uuid.uuid4().hex}" for _ in range(2))
    assert await locks.try_acquire(running)
    assert await locks.try_acquire(done)
    await drop_lock_connection(database_url, locks)

    await locks.release(done)

    assert not await taken_elsewhere(database_url, done)
    assert await taken_elsewhere(database_url, running)
    await locks.release(running)
