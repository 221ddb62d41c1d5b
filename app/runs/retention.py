"""The retention sweep inside the service (app/db/retention.py does the work).

Every replica runs the loop; the sweep's advisory lock lets one of them work at a time. The
first sweep waits a random part of the interval, so replicas started together do not all
try at once, and a sweep that fails (the database is away) is tried again next time.
"""

from __future__ import annotations

from typing import Any

import structlog
from psycopg_pool import AsyncConnectionPool

from app.analytics.sweep import outcome_keeper
from app.config import Settings
from app.db.retention import Policy, sweep
from app.runs.periodic import PeriodicSweep

log = structlog.get_logger(__name__)


class RetentionSweeper(PeriodicSweep):
    name = "retention sweep"

    def __init__(self, pool: AsyncConnectionPool[Any], settings: Settings) -> None:
        super().__init__(settings.retention_sweep_every_s)
        self.pool = pool
        self.policy = Policy.from_settings(settings)
        self.keep = outcome_keeper(settings)  # an expiring thread's outcome stays

    @property
    def active(self) -> bool:
        return super().active and self.policy.active

    async def sweep_once(self) -> None:
        swept = await sweep(self.pool, self.policy, keep=self.keep)
        if swept is None:
            log.debug("retention sweep skipped: another replica is sweeping")
        elif swept.threads_deleted or swept.threads_pruned or swept.threads_busy:
            log.info("retention sweep", **{k: v for k, v in vars(swept).items() if v})
