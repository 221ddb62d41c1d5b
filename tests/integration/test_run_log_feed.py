"""The stored logs of other replicas' runs, for a process's readers (app/runs/logs.py
`RunLogFeed`): each reader gets its run's events in order, once, then `done`; all the
readers cost one query a poll; a chunk shipped while a reader follows wakes the feed."""

from __future__ import annotations

import asyncio
from collections.abc import AsyncIterator
from typing import Any

import pytest
from psycopg_pool import AsyncConnectionPool

from app.background import Loop
from app.db.listen import Listener
from app.runs.logs import RunLogFeed
from app.runs.repository import RunRepository
from app.runs.stream import Done, Sequenced, Token, to_record


async def running(db: AsyncConnectionPool[Any], thread: str, run: str) -> None:
    """A run another replica runs: recorded as running, its lease live."""
    async with db.connection() as conn:
        await conn.execute(
            "INSERT INTO threads (thread_id, user_id, session_id) VALUES (%s, 'u', %s)",
            (thread, thread.split(":")[1]),
        )
        await conn.execute(
            "INSERT INTO runs (run_id, thread_id, status, owner) VALUES (%s, %s, 'running', 'x')",
            (run, thread),
        )
        await conn.execute(
            "INSERT INTO thread_leases (thread_id, run_id, expires_at, generation, owner)"
            " VALUES (%s, %s, now() + interval '1 hour', 1, 'x')",
            (thread, run),
        )


async def finish(db: AsyncConnectionPool[Any], run: str) -> None:
    async with db.connection() as conn:
        await conn.execute(
            """UPDATE runs SET status = 'completed', finished_at = now(),
                   result = '{"usage": {}, "checkpoint_id": null}'::jsonb
               WHERE run_id = %s""",
            (run,),
        )


def tokens(first: int, n: int) -> list[list[Any]]:
    return [to_record(s, Token(text=f"t{s}", message_id="m")) for s in range(first, first + n)]


async def read_all(events: AsyncIterator[list[Sequenced]]) -> list[Sequenced]:
    out: list[Sequenced] = []
    async with asyncio.timeout(10):
        async for batch in events:
            out.extend(batch)
    return out


@pytest.fixture
async def feed(db: AsyncConnectionPool[Any]) -> AsyncIterator[RunLogFeed]:
    f = RunLogFeed(RunRepository(db), poll_s=0.05)
    yield f
    await f.close()


class TestRunLogFeed:
    async def test_each_reader_gets_its_run_in_order_then_done_for_one_query_a_poll(
        self, db: AsyncConnectionPool[Any], feed: RunLogFeed, monkeypatch: pytest.MonkeyPatch
    ) -> None:
        repo = feed.repo
        await running(db, "u:a", "ra")
        await running(db, "u:b", "rb")
        polls = queries = 0
        logs_after, poll = repo.logs_after, feed.poll

        async def counted_query(follows: list[tuple[str, str, int]]) -> list[dict[str, Any]]:
            nonlocal queries
            queries += 1
            return await logs_after(follows)

        async def counted_poll() -> None:
            nonlocal polls
            polls += 1
            await poll()

        monkeypatch.setattr(repo, "logs_after", counted_query)
        monkeypatch.setattr(feed.loop, "step", counted_poll)
        readers = [
            asyncio.create_task(read_all(feed.follow("u:a", "ra", 0))),
            asyncio.create_task(read_all(feed.follow("u:a", "ra", 2))),  # came back at id 2
            asyncio.create_task(read_all(feed.follow("u:b", "rb", 0))),
        ]
        await repo.append_events("ra", tokens(1, 3))
        await repo.append_events("rb", tokens(1, 2))
        await asyncio.sleep(0.3)
        await repo.append_events("ra", tokens(4, 2))
        await asyncio.sleep(0.3)
        await finish(db, "ra")
        await finish(db, "rb")
        a, a_late, b = await asyncio.gather(*readers)

        assert [s for s, _ in a] == [1, 2, 3, 4, 5, 6]
        assert [s for s, _ in a_late] == [3, 4, 5, 6]
        assert [s for s, _ in b] == [1, 2, 3]
        assert all(isinstance(e, Done) for _, e in (a[-1], a_late[-1], b[-1]))
        assert 0 < queries <= polls  # one query a poll, however many readers

    async def test_a_run_that_does_not_exist_ends_the_stream_without_done(
        self, feed: RunLogFeed
    ) -> None:
        assert await read_all(feed.follow("u:x", "nope", 0)) == []

    async def test_a_chunk_shipped_while_a_reader_follows_wakes_the_feed(
        self, database_url: str, db: AsyncConnectionPool[Any], feed: RunLogFeed
    ) -> None:
        await running(db, "u:c", "rc")
        woken = asyncio.Event()
        loop = Loop("woken", lambda: asyncio.sleep(0), 60.0, jitter=False)
        loop.wake = woken.set  # type: ignore[method-assign]
        listener = Listener(database_url, {"cs_run_events": [loop]})
        listener.start()
        reader = asyncio.create_task(read_all(feed.follow("u:c", "rc", 0)))
        try:
            await asyncio.wait_for(listener.connected.wait(), 10)
            # what the reader asks of the run's owner (its log shipped), done here too so
            # the chunk below surely comes after it
            assert await feed.repo.request("u:c", "rc", "tail")
            woken.clear()
            await feed.repo.append_events("rc", tokens(1, 1))
            await asyncio.wait_for(woken.wait(), 5)
        finally:
            await finish(db, "rc")
            await reader
            await listener.stop()
