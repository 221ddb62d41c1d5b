"""The threads' own streams for a process's open pages (app/threads/feed.py): every page gets
its thread's events in order, once, and all of them cost one query a poll."""

from __future__ import annotations

import asyncio
from collections.abc import AsyncIterator
from typing import Any

import psycopg
import pytest
from psycopg.types.json import Jsonb
from psycopg_pool import AsyncConnectionPool

from app.threads import feed as feed_module
from app.threads.feed import ThreadFeed


async def add(pool: AsyncConnectionPool[Any], thread: str, n: int) -> None:
    async with pool.connection() as conn:
        for i in range(n):
            await conn.execute(
                "INSERT INTO thread_events (thread_id, kind, data) VALUES (%s, 'message', %s)",
                (thread, Jsonb({"n": i})),
            )


async def take(events: AsyncIterator[dict[str, Any]], n: int) -> list[dict[str, Any]]:
    out: list[dict[str, Any]] = []
    async with asyncio.timeout(10):
        async for row in events:
            out.append(row)
            if len(out) == n:
                break
    return out


@pytest.fixture
async def feed(db: AsyncConnectionPool[Any]) -> AsyncIterator[ThreadFeed]:
    f = ThreadFeed(db, poll_s=0.05)
    yield f
    await f.close()


async def test_a_page_gets_what_was_there_then_what_comes(
    db: AsyncConnectionPool[Any], feed: ThreadFeed
) -> None:
    await add(db, "u:a", 3)
    events = feed.follow("u:a", 0)
    first = await take(events, 3)
    await add(db, "u:a", 2)
    later = await take(events, 2)
    await events.aclose()  # type: ignore[attr-defined]
    ids = [r["id"] for r in first + later]
    assert ids == sorted(ids) and len(set(ids)) == 5
    assert [r["data"]["n"] for r in first + later] == [0, 1, 2, 0, 1]
    assert feed._followers == {}  # a closed page is forgotten


async def test_two_pages_of_one_thread_from_different_ids_each_get_their_own_rest(
    db: AsyncConnectionPool[Any], feed: ThreadFeed
) -> None:
    await add(db, "u:b", 4)
    head = feed.follow("u:b", 0)
    seen = await take(head, 4)
    resumed = feed.follow("u:b", seen[1]["id"])  # a page back with Last-Event-ID
    assert [r["id"] for r in await take(resumed, 2)] == [r["id"] for r in seen[2:]]
    await add(db, "u:b", 1)
    assert (await take(head, 1))[0]["id"] == (await take(resumed, 1))[0]["id"]


async def test_many_pages_cost_one_query_a_poll(
    db: AsyncConnectionPool[Any], feed: ThreadFeed, monkeypatch: pytest.MonkeyPatch
) -> None:
    threads = [f"u:many{i}" for i in range(50)]
    pages = [feed.follow(t, 0) for t in threads]
    readers = [asyncio.create_task(take(p, 1)) for p in pages]
    await asyncio.sleep(0.2)  # every page is followed, nothing to read yet
    polls = 0
    real_poll = feed.poll

    async def counted() -> bool:
        nonlocal polls
        polls += 1
        return await real_poll()

    monkeypatch.setattr(feed, "poll", counted)
    started = asyncio.get_running_loop().time()
    for t in threads:
        await add(db, t, 1)
    got = await asyncio.gather(*readers)
    elapsed = asyncio.get_running_loop().time() - started
    assert all(len(g) == 1 for g in got)
    # one statement a poll for all 50 pages, not 50
    assert polls <= elapsed / feed.poll_s + 2


async def test_a_page_far_behind_is_closed_and_resumes_from_its_last_id(
    db: AsyncConnectionPool[Any], feed: ThreadFeed, monkeypatch: pytest.MonkeyPatch
) -> None:
    monkeypatch.setattr(feed_module, "BEHIND_LIMIT", 3)
    await add(db, "u:slow", 10)
    events = feed.follow("u:slow", 0)
    await asyncio.sleep(0.3)  # it reads nothing meanwhile
    got = [row async for row in events]  # ends by itself
    assert len(got) == 3
    rest = await take(feed.follow("u:slow", got[-1]["id"]), 3)
    assert rest[0]["id"] > got[-1]["id"]


async def test_the_database_going_away_does_not_end_the_pages(
    db: AsyncConnectionPool[Any], feed: ThreadFeed, database_url: str
) -> None:
    events = feed.follow("u:blip", 0)
    reader = asyncio.create_task(take(events, 2))
    await add(db, "u:blip", 1)
    await asyncio.sleep(0.2)
    async with await psycopg.AsyncConnection.connect(database_url, autocommit=True) as admin:
        await admin.execute(
            """SELECT pg_terminate_backend(pid) FROM pg_stat_activity
               WHERE datname = current_database() AND pid <> pg_backend_pid()"""
        )
    # the test's own insert may be handed a connection the kill just cut (the pool finds
    # out on that use); it is the feed under test, so the insert is retried once
    try:
        await add(db, "u:blip", 1)
    except psycopg.OperationalError:
        await add(db, "u:blip", 1)
    got = await reader
    assert [r["data"]["n"] for r in got] == [0, 0]
