"""One writer per thread, across processes and poolers: a lease row per thread.

A claim (`cs_claim_thread`, app/migrations/versions/0005 and 0009) gives the run the thread's next
generation number, or nothing while a live lease holds it. The run's commits are fenced
with that generation (app/db/leases.py), so a run that lost its claim, because its process
stalled or its connections died and another replica took over an expired lease, stops
before it commits anything: the checkpoint chain never forks.

Nothing depends on a connection's session, so the same code works behind PgBouncer in
transaction mode. The price of that: when a process dies, its leases are free only once
they expire (`THREAD_LEASE_TTL_S`); until then the thread answers 409 thread_busy. The owner
renews its leases every third of that time, and a fenced commit renews its own once a
third of it has gone by.
"""

from __future__ import annotations

import uuid
from collections.abc import Callable
from dataclasses import dataclass
from typing import Any

import structlog
from psycopg_pool import AsyncConnectionPool

from app.background import Loop
from app.fencing import Lease
from app.metrics import lock_wait, timed

log = structlog.get_logger(__name__)

# A claim that is not a run's (a staff message, a rewind) notes itself in `held_claims`
# (migration 0029) in the same statement, so the dead-run sweep finds its lease if this
# process dies holding it; a run's claim is cs_begin_run's and notes nothing.
_CLAIM = """WITH claim AS (
        SELECT generation, stale_run
        FROM cs_claim_thread(%(thread)s, %(owner)s, %(run)s, %(ttl_ms)s)
    ), noted AS (
        INSERT INTO held_claims (thread_id, run_id)
        SELECT %(thread)s, %(run)s FROM claim WHERE claim.generation IS NOT NULL
        ON CONFLICT DO NOTHING
    )
    SELECT generation, stale_run FROM claim"""
_RELEASE = "SELECT cs_release_thread(%s, %s)"
# Renews the held leases, and names the ones their own run already released: the run's
# closing statement frees its lease a moment before the run stops renewing it, so a renewal
# in between found the lease gone and reported a takeover (an error and a stopped run, seen
# at 1,000 open conversations in `make bench`). A lease the reaper freed (`dead_run` names
# its run) or another claim took (a newer generation) is neither, so it counts as lost.
_RENEW = """WITH held AS (
        SELECT * FROM unnest(%(threads)s::text[], %(generations)s::bigint[], %(runs)s::text[])
            AS h(thread_id, generation, run_id)
    ), renewed AS (
        UPDATE thread_leases AS l
        SET expires_at = clock_timestamp() + make_interval(secs => %(ttl_ms)s / 1000.0)
        FROM held h
        WHERE l.thread_id = h.thread_id AND l.generation = h.generation AND l.run_id IS NOT NULL
        RETURNING l.thread_id
    )
    SELECT thread_id, false AS released FROM renewed
    UNION ALL
    SELECT l.thread_id, true FROM thread_leases l
    JOIN held h ON l.thread_id = h.thread_id AND l.generation = h.generation
    WHERE l.run_id IS NULL AND l.dead_run IS DISTINCT FROM h.run_id"""


@dataclass(frozen=True)
class Claim:
    lease: Lease
    stale_run: str | None  # the run of an expired lease this claim took over (it died)


class ThreadLeases:
    def __init__(self, pool: AsyncConnectionPool[Any], *, ttl_s: float) -> None:
        self.pool = pool
        self.ttl_ms = max(1, int(ttl_s * 1000))
        self.owner = uuid.uuid4().hex  # this process instance
        self._held: dict[str, Lease] = {}
        self._on_lost: dict[str, Callable[[], None]] = {}
        # A third of the TTL, so two renewals can fail before a lease runs out; the database
        # away, the fences decide. No query while the process holds no lease.
        self.heartbeat = Loop(
            "lease heartbeat",
            self.renew,
            self.ttl_ms / 3000,
            when=lambda: bool(self._held),
            jitter=False,
        )

    async def open(self) -> None:
        """Start the heartbeat alone (the lifespan adds it to the process's loops)."""
        self.heartbeat.start()

    async def close(self) -> None:
        await self.heartbeat.stop()

    @timed(lock_wait)
    async def claim(self, thread_id: str, run_id: str) -> Claim | None:
        """The thread for `run_id`, or None while another live run holds it."""
        async with self.pool.connection() as conn:
            cur = await conn.execute(
                _CLAIM,
                {"thread": thread_id, "owner": self.owner, "run": run_id, "ttl_ms": self.ttl_ms},
            )
            row = await cur.fetchone()
        if row is None or row["generation"] is None:
            return None
        lease = Lease(thread_id, int(row["generation"]), run_id, self.ttl_ms)
        self._held[thread_id] = lease
        if row["stale_run"]:
            log.warning(
                "took over an expired thread lease; its run is abandoned",
                thread_id=thread_id,
                abandoned_run_id=row["stale_run"],
            )
        return Claim(lease, row["stale_run"])

    def on_lost(self, lease: Lease, callback: Callable[[], None]) -> None:
        """Call `callback` if the heartbeat finds the lease gone (taken over)."""
        if self._held.get(lease.thread_id) == lease:
            self._on_lost[lease.thread_id] = callback

    def held(self, lease: Lease) -> None:
        """Renew `lease` with the others from now on (a claim made by `cs_begin_run`)."""
        self._held[lease.thread_id] = lease

    def forget(self, lease: Lease) -> None:
        """Stop renewing `lease`: it was released (by the statement that closed its run)."""
        if self._held.get(lease.thread_id) == lease:
            del self._held[lease.thread_id]
            self._on_lost.pop(lease.thread_id, None)

    async def release(self, lease: Lease) -> None:
        """Free the thread, if the lease is still this run's (a fenced no-op otherwise)."""
        self.forget(lease)
        try:
            async with self.pool.connection() as conn:
                await conn.execute(_RELEASE, (lease.thread_id, lease.generation))
        except Exception as error:
            # It expires on its own; until then the thread answers 409.
            log.warning(
                "could not release a thread lease",
                thread_id=lease.thread_id,
                error_type=type(error).__name__,
            )

    async def renew(self) -> None:
        """Renew every lease this process holds, in one statement; report the lost ones."""
        held = list(self._held.values())
        if not held:
            return
        params = {
            "threads": [h.thread_id for h in held],
            "generations": [h.generation for h in held],
            "runs": [h.run_id for h in held],
            "ttl_ms": self.ttl_ms,
        }
        async with self.pool.connection() as conn:
            cur = await conn.execute(_RENEW, params)
            rows = await cur.fetchall()
        renewed = {row["thread_id"] for row in rows if not row["released"]}
        released = {row["thread_id"] for row in rows if row["released"]}
        for lease in held:
            if lease.thread_id in renewed or self._held.get(lease.thread_id) != lease:
                continue
            if lease.thread_id in released:  # its run closed: nothing to renew any more
                self.forget(lease)
                continue
            log.error(
                "thread lease lost to another run; stopping this one",
                thread_id=lease.thread_id,
                generation=lease.generation,
            )
            del self._held[lease.thread_id]
            callback = self._on_lost.pop(lease.thread_id, None)
            if callback is not None:
                callback()
