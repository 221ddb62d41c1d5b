"""Admission: past what a worker can serve, refuse a turn early and cheaply.

Letting every turn in past the machine's knee makes all of them slow at once: the event loop
falls behind, each turn holds its pooled connections longer, waits for a connection pass
DB_POOL_TIMEOUT_S, tools fail for want of one and the model answers from the error. So a
post (or a resume) is admitted only while this worker keeps up, and refused otherwise with
`503 overloaded` and `Retry-After`, before it takes a pooled connection or calls the model.

What "keeps up" means is measured, not configured per machine: a loop every
ADMIT_TICK_S notes how late the event loop woke it (the lag every coroutine of the worker
sees) and how long requests waited for a pooled connection since the last tick. The number
of turns the worker admits at once (`limit`) adapts to them, as TCP's window does: while
the worker keeps up it grows by a tenth a tick (back from the floor to ADMIT_MAX_TURNS in
about five seconds); when a request timed out waiting for a connection, or on two ticks
running those that waited waited more than ADMIT_MAX_WAIT_MS on average or the lag passed
ADMIT_MAX_LAG_MS, it shrinks to 90% of the turns in flight, at most once per ADMIT_BACKOFF_S
(the time a cut takes to show). ADMIT_MAX_TURNS caps it (memory, the model's own
concurrency).

The bounds sit well above what a worker busy at its peak shows: 32 customers of an instant
model on one worker keep every connection busy and the lag at tens of ms, and refusing
them would only lower the throughput. Long waits for a connection and a loop seconds
behind are what turn a busy worker into a collapsing one. On a faster machine they begin
at more turns in flight, so the limit settles higher; a slow model keeps turns in flight
without either, so it does not lower the limit.
"""

from __future__ import annotations

import contextlib
import time
from collections.abc import Callable, Iterator, Mapping

import structlog

from app.errors import AppError

log = structlog.get_logger(__name__)

ADMIT_TICK_S = 0.1
ADMIT_BACKOFF_S = 0.5
MIN_LIMIT = 4.0  # never so low that a recovering worker cannot learn it is well again
SHRINK = 0.9
GROW = 0.1  # while it keeps up: back from the floor to 400 in about five seconds
RETRY_AFTER_S = 2


class Overloaded(AppError):
    """503: this replica is serving all the turns it can; retry after `Retry-After`."""

    status_code = 503
    code = "overloaded"

    def __init__(self, retry_after_s: int = RETRY_AFTER_S) -> None:
        super().__init__("the service is busy right now; please retry in a few seconds")
        self.headers = {"Retry-After": str(retry_after_s)}
        self.details = {"retry_after_s": retry_after_s}


class Admission:
    def __init__(
        self,
        live: Callable[[], int],
        *,
        max_turns: int,
        max_lag_ms: float,
        max_wait_ms: float = 100.0,
        pool_stats: Callable[[], Mapping[str, int]] | None = None,
        refused: Callable[[], None] | None = None,
    ) -> None:
        self.live = live  # turns this worker runs now
        self.max_turns = float(max_turns)
        self.max_lag_s = max_lag_ms / 1000
        self.max_wait_ms = max_wait_ms
        self.pool_stats = pool_stats  # psycopg_pool's counters (`get_stats`), cumulative
        self.refused = refused
        self.on = max_turns > 0
        self.limit = self.max_turns
        self.opening = 0  # admitted, not yet running (opening their run)
        self.lag_s = 0.0
        self._due = 0.0  # when the last tick expected to wake
        self._cut_at = 0.0
        self._late = False
        self._slow = False
        self._pool = (0, 0, 0)  # requests that waited, their wait in ms, pool timeouts

    def in_flight(self) -> int:
        return self.live() + self.opening

    @contextlib.contextmanager
    def admit(self) -> Iterator[None]:
        """Around the opening of a turn: refused (Overloaded) when the worker is full."""
        if self.on and self.in_flight() >= self.limit:
            if self.refused is not None:
                self.refused()
            raise Overloaded()
        self.opening += 1
        try:
            yield
        finally:
            self.opening -= 1

    async def tick(self) -> None:
        """The loop's step (every ADMIT_TICK_S): the lag since the last one, and the limit."""
        now = time.monotonic()
        self.lag_s = max(0.0, now - self._due) if self._due else 0.0
        self._due = now + ADMIT_TICK_S
        late = self.lag_s > self.max_lag_s
        timeouts, slow = self._pool_waits()
        # A late tick or one tick of long waits alone is a burst (60 posts at once from a
        # page that reconnected): two running are a worker falling behind.
        behind = timeouts or (slow and self._slow) or (late and self._late)
        self._late, self._slow = late, slow
        in_flight = self.in_flight()
        if behind:
            if now - self._cut_at >= ADMIT_BACKOFF_S:
                self._cut_at = now
                floor = min(MIN_LIMIT, self.max_turns)
                self.limit = max(floor, min(self.limit, in_flight) * SHRINK)
                log.info(
                    "admitting fewer turns",
                    limit=round(self.limit),
                    in_flight=in_flight,
                    lag_ms=round(1000 * self.lag_s),
                )
        else:
            self.limit = min(self.max_turns, self.limit + max(1.0, self.limit * GROW))

    def _pool_waits(self) -> tuple[bool, bool]:
        """Since the last tick: did a request time out waiting for a pooled connection; did
        those that waited wait more than ADMIT_MAX_WAIT_MS on average."""
        if self.pool_stats is None:
            return False, False
        stats = self.pool_stats()
        now = (
            stats.get("requests_queued", 0),
            stats.get("requests_wait_ms", 0),
            stats.get("requests_errors", 0),
        )
        queued, waited, timeouts = (a - b for a, b in zip(now, self._pool, strict=True))
        self._pool = now
        return timeouts > 0, queued > 0 and waited / queued > self.max_wait_ms
