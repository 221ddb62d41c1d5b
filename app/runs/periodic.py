"""A background sweep every replica runs on an interval (retention, conversation outcomes).

The sweep's own advisory lock lets one replica work at a time. The first sweep waits a
random part of the interval, so replicas started together do not all try at once, and a
sweep that fails (the database is away, a lock timed out) is tried again next time.
"""

from __future__ import annotations

import asyncio
import contextlib
import random

import structlog

log = structlog.get_logger(__name__)


class PeriodicSweep:
    name = "sweep"

    def __init__(self, every_s: float) -> None:
        self.every_s = every_s
        self._task: asyncio.Task[None] | None = None

    @property
    def active(self) -> bool:
        return self.every_s > 0

    async def sweep_once(self) -> None:
        raise NotImplementedError

    async def open(self) -> None:
        if self.active:
            self._task = asyncio.create_task(self._sweep_forever())

    async def close(self) -> None:
        if self._task is not None:
            self._task.cancel()
            with contextlib.suppress(asyncio.CancelledError):
                await self._task
            self._task = None

    async def _sweep_forever(self) -> None:
        await asyncio.sleep(random.uniform(0, self.every_s))
        while True:
            try:
                await self.sweep_once()
            except Exception as error:
                log.warning(f"{self.name} failed", error_type=type(error).__name__)
            await asyncio.sleep(self.every_s)
