"""What other replicas ask of this process's runs: a cancel, or a follow request (ship the
log). Polled: nothing here depends on a session, so PgBouncer in transaction mode is fine.
The same loop prunes old event logs, and closes the runs of processes that died on threads
nobody claims again (every replica sweeps, so any may die)."""

from __future__ import annotations

import asyncio
import contextlib
import time
from collections.abc import Callable

import structlog

from app.runs.repository import RunRepository
from app.runs.run import Run

log = structlog.get_logger(__name__)

# How often a process looks for requests for its runs (one indexed query, only while it has
# runs), and prunes old event logs.
REQUEST_POLL_S = 0.25
PRUNE_EVERY_S = 60.0


class RequestPoller:
    def __init__(
        self,
        repo: RunRepository,
        live: dict[str, Run],
        cancel: Callable[[Run], None],
        *,
        log_ttl_s: float,
        lease_ttl_s: float,
    ) -> None:
        self.repo = repo
        # A lease expired this long ago (a second TTL) belongs to a dead process: its run is
        # closed. Swept as often, so such a run reads `abandoned` within about three TTLs.
        self.lease_ttl_s = lease_ttl_s
        self.live = live  # the process's runs until `done`, shared with the executor
        self.cancel = cancel
        self.log_ttl_s = log_ttl_s
        self._task: asyncio.Task[None] | None = None

    def open(self) -> None:
        self._task = asyncio.create_task(self._poll_forever())

    async def close(self) -> None:
        if self._task is not None:
            self._task.cancel()
            with contextlib.suppress(asyncio.CancelledError):
                await self._task

    async def _poll_forever(self) -> None:
        last_prune = last_sweep = 0.0
        while True:
            await asyncio.sleep(REQUEST_POLL_S)
            try:
                if self.live:
                    await self.poll()
                if time.monotonic() - last_prune > PRUNE_EVERY_S:
                    last_prune = time.monotonic()
                    await self.repo.prune_logs(self.log_ttl_s)
                if time.monotonic() - last_sweep > self.lease_ttl_s:
                    last_sweep = time.monotonic()
                    await self.repo.abandon_dead(self.lease_ttl_s)
            except Exception as error:  # the database is away: try again next time
                log.warning("could not poll run requests", error_type=type(error).__name__)

    async def poll(self) -> None:
        for row in await self.repo.requests_for(list(self.live)):
            run = self.live.get(row["run_id"])
            if run is None:
                continue
            if row["tail_requested"] and run.shipper is not None:
                run.shipper.start()
            if row["cancel_requested"]:
                self.cancel(run)
