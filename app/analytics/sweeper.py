"""The outcome sweep inside the service (app/analytics/sweep.py does the work).

Every replica runs the loop; the sweep's advisory lock lets one of them work at a time. As
with retention, the first sweep waits a random part of the interval, and a sweep that fails
is tried again next time.
"""

from __future__ import annotations

import asyncio
import contextlib
import random
from typing import Any

import structlog
from psycopg_pool import AsyncConnectionPool

from app.analytics.sweep import SweepPolicy, sweep
from app.config import Settings

log = structlog.get_logger(__name__)


class OutcomeSweeper:
    def __init__(self, pool: AsyncConnectionPool[Any], settings: Settings) -> None:
        self.pool = pool
        self.policy = SweepPolicy.from_settings(settings)
        self.every_s = settings.outcomes_sweep_every_s
        self._task: asyncio.Task[None] | None = None

    async def open(self) -> None:
        if self.every_s > 0:
            self._task = asyncio.create_task(self._sweep_forever())

    async def close(self) -> None:
        if self._task is not None:
            self._task.cancel()
            with contextlib.suppress(asyncio.CancelledError):
                await self._task
            self._task = None

    async def sweep_once(self) -> None:
        swept = await sweep(self.pool, self.policy)
        if swept is None:
            log.debug("outcome sweep skipped: another replica is sweeping")
        elif swept.outcomes:
            log.info("outcome sweep", outcomes=swept.outcomes, batches=swept.batches)

    async def _sweep_forever(self) -> None:
        await asyncio.sleep(random.uniform(0, self.every_s))
        while True:
            try:
                await self.sweep_once()
            except Exception as error:  # the database is away or a lock timed out: next time
                log.warning("outcome sweep failed", error_type=type(error).__name__)
            await asyncio.sleep(self.every_s)
