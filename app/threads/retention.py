"""The retention sweep inside the service (app/db/retention.py does the work).

Every replica runs the loop (app/background.py: the first sweep after a random part of the
interval, a failed one tried again next time); the sweep's advisory lock lets one of them
work at a time.
"""

from __future__ import annotations

from typing import Any

import structlog
from psycopg_pool import AsyncConnectionPool

from app.analytics.sweep import outcome_keeper
from app.config import Settings
from app.db.retention import Policy, sweep

log = structlog.get_logger(__name__)


class RetentionSweeper:
    name = "retention sweep"

    def __init__(self, pool: AsyncConnectionPool[Any], settings: Settings) -> None:
        self.every_s = settings.retention_sweep_every_s
        self.pool = pool
        self.policy = Policy.from_settings(settings)
        self.keep = outcome_keeper(settings)  # an expiring thread's outcome stays

    @property
    def active(self) -> bool:
        return self.every_s > 0 and self.policy.active

    async def sweep_once(self) -> None:
        swept = await sweep(self.pool, self.policy, keep=self.keep)
        if swept is None:
            log.debug("retention sweep skipped: another replica is sweeping")
        elif swept.threads_deleted or swept.threads_pruned or swept.threads_busy:
            log.info("retention sweep", **{k: v for k, v in vars(swept).items() if v})
