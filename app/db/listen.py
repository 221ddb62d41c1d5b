"""One LISTEN connection per process: a NOTIFY on a channel wakes the loops that serve it.

The connection must reach Postgres itself (DATABASE_LISTEN_URL, else DATABASE_URL): a
LISTEN through PgBouncer's transaction pool is not kept. While the listener is connected
its loops poll only as a slow fallback (`Loop.listening`); while it is not (never
configured, or reconnecting after Postgres went away) they poll at their own pace, so a
notification lost costs latency, never work. On every (re)connect the loops are woken
once: what was notified while nobody listened is picked up at once.
"""

from __future__ import annotations

import asyncio
import contextlib
from collections.abc import Iterable, Mapping

import structlog
from psycopg import AsyncConnection, sql

from app.background import Loop
from app.retry import stepped_s

log = structlog.get_logger(__name__)

RETRY_S = (0.5, 1.0, 2.0, 5.0)  # between reconnects, the last repeated


class Listener:
    def __init__(self, url: str, channels: Mapping[str, Iterable[Loop]]) -> None:
        self.url = url
        self.channels = {name: list(loops) for name, loops in channels.items()}
        self.connected = asyncio.Event()
        self._task: asyncio.Task[None] | None = None

    def start(self) -> None:
        self._task = asyncio.create_task(self._listen_forever(), name="listener")

    async def stop(self) -> None:
        if self._task is not None:
            self._task.cancel()
            with contextlib.suppress(asyncio.CancelledError):
                await self._task
            self._task = None
        self._listening(False)

    async def _listen_forever(self) -> None:
        failures = 0
        while True:
            try:
                await self._listen_once()
            except asyncio.CancelledError:
                raise
            except Exception as error:
                log.warning("LISTEN connection lost", error_type=type(error).__name__)
            # a connection that was up starts the back-off over; failed connects lengthen it
            failures = 0 if self.connected.is_set() else failures + 1
            self._listening(False)
            await asyncio.sleep(stepped_s(failures + 1, RETRY_S))  # the lost one counts too

    async def _listen_once(self) -> None:
        # Keepalives: a connection that went silent (a NAT dropped it) is found dead and
        # replaced, rather than leaving its loops at the slow pace for good.
        connect = AsyncConnection.connect(
            self.url,
            autocommit=True,
            connect_timeout=10,
            application_name="cs-agent listen",
            keepalives=1,
            keepalives_idle=10,
            keepalives_interval=5,
            keepalives_count=3,
        )
        async with await connect as conn:
            for channel in self.channels:
                await conn.execute(sql.SQL("LISTEN {}").format(sql.Identifier(channel)))
            self._listening(True)
            for loops in self.channels.values():  # what came while nobody listened
                for loop in loops:
                    loop.wake()
            async for notify in conn.notifies():
                for loop in self.channels.get(notify.channel, ()):
                    loop.wake()

    def _listening(self, on: bool) -> None:
        for loops in self.channels.values():
            for loop in loops:
                loop.listening = on
                if not on:
                    loop.wake()  # back to its own pace now, not after the slow interval
        if on:
            self.connected.set()
        else:
            self.connected.clear()
