"""What other replicas ask of this process's runs (a cancel, or a follow request: ship the
log), and the two sweeps of run records every replica runs: old event logs pruned, and the
runs of processes that died on threads nobody claims again closed (any replica may die).

Three loops on the one background mechanism (app/background.py). A request wakes its loop
with a NOTIFY (`cs_run_requests`); the poll, one indexed query and only while this process
has runs, is the fallback. Nothing depends on a session, so PgBouncer in transaction mode
is fine.
"""

from __future__ import annotations

from collections.abc import Callable

import structlog

from app.background import Loop
from app.runs.repository import RunRepository
from app.runs.run import Run

log = structlog.get_logger(__name__)

REQUEST_POLL_S = 0.25  # without LISTEN: a cancel reaches its run within about this long
REQUEST_FALLBACK_S = 5.0  # with LISTEN: only a lost notification waits this long
PRUNE_EVERY_S = 60.0


class RunRequests:
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
        self.live = live  # the process's runs until `done`, shared with the executor
        self.cancel = cancel
        self.log_ttl_s = log_ttl_s
        # A lease expired this long ago (a second TTL) belongs to a dead process: its run is
        # closed. Swept as often, so such a run reads `abandoned` within about three TTLs.
        self.lease_ttl_s = lease_ttl_s
        self.requests = Loop(
            "run requests",
            self.poll,
            REQUEST_POLL_S,
            when=lambda: bool(self.live),
            jitter=False,
            fallback_s=REQUEST_FALLBACK_S,
        )

    def loops(self) -> list[Loop]:
        return [
            self.requests,
            Loop("run log pruning", self.prune_logs, PRUNE_EVERY_S),
            Loop("dead runs", self.abandon_dead, self.lease_ttl_s),
        ]

    async def poll(self) -> None:
        for row in await self.repo.requests_for(list(self.live)):
            run = self.live.get(row["run_id"])
            if run is None:
                continue
            if row["tail_requested"] and run.shipper is not None:
                run.shipper.start()
            if row["cancel_requested"]:
                self.cancel(run)

    async def prune_logs(self) -> None:
        await self.repo.prune_logs(self.log_ttl_s)

    async def abandon_dead(self) -> None:
        await self.repo.abandon_dead(self.lease_ttl_s)
