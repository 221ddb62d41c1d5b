"""LISTEN/NOTIFY wakes the background loops (app/db/listen.py, app/background.py): a
notification wakes its loop at once; a lost one (the listener's connection killed) is made
up by the loop's own polling; and the SQL that creates work notifies (a thread event, a
webhook, a run request)."""

from __future__ import annotations

import asyncio
from typing import Any

import psycopg
from psycopg_pool import AsyncConnectionPool

from app.background import Loop
from app.config import Settings
from app.db.listen import Listener
from app.lifespan import listener_for
from app.runs.repository import RunRepository

SLOW_S = 60.0  # a loop's own pace here: a step within seconds was woken, not polled


class Steps:
    def __init__(self) -> None:
        self.count = 0
        self.changed = asyncio.Condition()

    async def step(self) -> None:
        async with self.changed:
            self.count += 1
            self.changed.notify_all()

    async def reach(self, count: int, timeout_s: float = 5.0) -> None:
        async with asyncio.timeout(timeout_s), self.changed:
            await self.changed.wait_for(lambda: self.count >= count)


async def notify(url: str, channel: str) -> None:
    async with await psycopg.AsyncConnection.connect(url, autocommit=True) as conn:
        await conn.execute(f"NOTIFY {channel}")


async def started(url: str, loop: Loop, channel: str) -> Listener:
    listener = Listener(url, {channel: [loop]})
    listener.start()
    await asyncio.wait_for(listener.connected.wait(), 10)
    return listener


class TestWakeUps:
    async def test_a_notification_wakes_its_loop_at_once(self, database_url: str) -> None:
        steps = Steps()
        loop = Loop("test loop", steps.step, SLOW_S, jitter=False, fallback_s=SLOW_S)
        loop.start()
        listener = await started(database_url, loop, "cs_test_channel")
        try:
            await steps.reach(2)  # the first step, and the wake-up at connect
            await asyncio.sleep(0.2)
            assert steps.count == 2 and loop.listening
            await notify(database_url, "cs_test_channel")
            await steps.reach(3)
        finally:
            await listener.stop()
            await loop.stop()

    async def test_a_lost_notification_is_made_up_by_polling(self, database_url: str) -> None:
        steps = Steps()
        # Its own pace is quick, the fallback while listening slow: a cut listener must
        # bring the loop back to its own pace, and a reconnect wake it.
        loop = Loop("test loop", steps.step, 0.2, jitter=False, fallback_s=SLOW_S)
        loop.start()
        listener = await started(database_url, loop, "cs_test_channel")
        try:
            await steps.reach(2)
            async with await psycopg.AsyncConnection.connect(database_url, autocommit=True) as c:
                await c.execute(
                    "SELECT pg_terminate_backend(pid) FROM pg_stat_activity "
                    "WHERE application_name = 'cs-agent listen'"
                )
            # woken as the listener lost its connection, then polled at its own pace (not
            # the fallback's), and woken again when the listener is back
            await steps.reach(5)
            await asyncio.wait_for(listener.connected.wait(), 10)
            assert loop.listening
        finally:
            await listener.stop()
            await loop.stop()

    def test_off_means_polling_only(self) -> None:
        settings = Settings(database_listen_url="off", _env_file=None)  # type: ignore[call-arg]
        assert listener_for(settings, "postgresql://unused", None) is None  # type: ignore[arg-type]


class TestTheSqlNotifies:
    async def test_thread_events_webhooks_and_run_requests_notify(
        self, database_url: str, db: AsyncConnectionPool[Any]
    ) -> None:
        seen = {c: Steps() for c in ("cs_thread_events", "cs_webhooks", "cs_run_requests")}
        loops = {
            c: Loop(c, s.step, SLOW_S, jitter=False, fallback_s=SLOW_S) for c, s in seen.items()
        }
        for loop in loops.values():
            loop.start()
        listener = Listener(database_url, {c: [loop] for c, loop in loops.items()})
        listener.start()
        await asyncio.wait_for(listener.connected.wait(), 10)
        try:
            for s in seen.values():
                await s.reach(2)  # the first step, and the wake-up at connect
            async with db.connection() as conn:
                await conn.execute(
                    "INSERT INTO threads (thread_id, user_id, session_id) VALUES ('u:s', 'u', 's')"
                )
                await conn.execute(
                    "INSERT INTO runs (run_id, thread_id, status, owner) "
                    "VALUES ('r1', 'u:s', 'running', 'me')"
                )
                await conn.execute(
                    "INSERT INTO thread_events (thread_id, kind, data) VALUES ('u:s', 'message', "
                    """'{"author": "customer", "id": "m1", "content": "hi"}')"""
                )
            await seen["cs_thread_events"].reach(3)
            await seen["cs_webhooks"].reach(3)  # the webhook the event enqueued
            assert seen["cs_run_requests"].count == 2
            assert await RunRepository(db).request("u:s", "r1", "cancel")
            await seen["cs_run_requests"].reach(3)
        finally:
            await listener.stop()
            for loop in loops.values():
                await loop.stop()
