"""The outcome sweep inside the service (app/analytics/sweep.py does the work).

Every replica runs the loop (app/background.py); the sweep's advisory lock lets one of them
work at a time. After the sweep, with the judge on, comes the judging step
(app/analytics/judging.py), outside the sweep's lock and transactions.
"""

from __future__ import annotations

from typing import Any

import structlog
from psycopg_pool import AsyncConnectionPool

from app.analytics.judging import judge_after_sweep
from app.analytics.sweep import SweepPolicy, sweep
from app.config import Settings

log = structlog.get_logger(__name__)


class OutcomeSweeper:
    name = "outcome sweep"

    def __init__(self, pool: AsyncConnectionPool[Any], settings: Settings) -> None:
        self.every_s = settings.outcomes_sweep_every_s
        self.pool = pool
        self.settings = settings
        self.policy = SweepPolicy.from_settings(settings)

    @property
    def active(self) -> bool:
        return self.every_s > 0

    async def sweep_once(self) -> None:
        swept = await sweep(self.pool, self.policy)
        if swept is None:
            log.debug("outcome sweep skipped: another replica is sweeping")
        elif swept.outcomes:
            log.info("outcome sweep", outcomes=swept.outcomes, batches=swept.batches)
        judged = await judge_after_sweep(self.pool, self.settings)
        if judged is not None and (judged.scored or judged.unscored):
            log.info("outcomes judged", scored=judged.scored, unscored=judged.unscored)
