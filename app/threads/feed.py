"""The threads' own streams (`thread_events`: messages of every author, control changes) for
this process's open `/events` pages and console views: one poller asks for every followed
thread in one query, instead of one query per open page every poll (1,000 open pages were
~3,300 queries a second). Polled by id, so any replica and PgBouncer in transaction mode serve
it; a page that falls far behind is closed and comes back with `Last-Event-ID`."""

from __future__ import annotations

import asyncio
from collections.abc import AsyncIterator
from dataclasses import dataclass, field
from typing import Any

import structlog
from psycopg_pool import AsyncConnectionPool

from app.background import Loop

log = structlog.get_logger(__name__)

POLL_S = 0.3  # without LISTEN
FALLBACK_S = 5.0  # with LISTEN: only a lost notification waits this long
PER_THREAD = 200  # rows of one thread per poll: one busy thread does not starve the rest
BEHIND_LIMIT = 2000  # rows queued for one page before it is closed (it reconnects)

# Each followed thread after its own cursor, in one statement (thread_events_thread index).
NEW_EVENTS = """SELECT e.id, e.thread_id, e.kind, e.data
    FROM unnest(%s::text[], %s::bigint[]) AS f(thread_id, after)
    CROSS JOIN LATERAL (
        SELECT id, thread_id, kind, data FROM thread_events
        WHERE thread_id = f.thread_id AND id > f.after ORDER BY id LIMIT %s
    ) e
    ORDER BY e.id"""


@dataclass(eq=False)
class _Follower:
    after: int
    queue: asyncio.Queue[dict[str, Any] | None] = field(default_factory=asyncio.Queue)


class ThreadFeed:
    def __init__(self, pool: AsyncConnectionPool[Any], poll_s: float = POLL_S) -> None:
        self.pool = pool
        self.poll_s = poll_s
        self._followers: dict[str, set[_Follower]] = {}
        # Woken by `cs_thread_events` (app/db/listen.py) and by a page that starts following;
        # no query while no page follows a thread.
        self.loop = Loop(
            "thread feed",
            self.poll,  # a failed poll is logged by the loop and tried again
            poll_s,
            when=lambda: bool(self._followers),
            jitter=False,
            fallback_s=FALLBACK_S,
        )

    async def follow(self, thread_id: str, after: int) -> AsyncIterator[dict[str, Any]]:
        """The thread's events after id `after` (`id`, `kind`, `data`), then new ones as
        they come, until the caller stops (or falls BEHIND_LIMIT rows behind)."""
        follower = _Follower(after)
        self._followers.setdefault(thread_id, set()).add(follower)
        self.loop.start()  # (once: the lifespan may have started it already)
        self.loop.wake()  # catch up now, not at the next poll
        try:
            while (row := await follower.queue.get()) is not None:
                yield row
        finally:
            followers = self._followers.get(thread_id)
            if followers is not None:
                followers.discard(follower)
                if not followers:
                    del self._followers[thread_id]

    async def close(self) -> None:
        await self.loop.stop()

    async def poll(self) -> bool:
        """One query for every followed thread; True when a thread had a full batch."""
        cursors = {t: min(f.after for f in fs) for t, fs in self._followers.items() if fs}
        if not cursors:
            return False
        async with self.pool.connection() as conn:
            cur = await conn.execute(
                NEW_EVENTS, (list(cursors), list(cursors.values()), PER_THREAD)
            )
            rows = await cur.fetchall()
        counts: dict[str, int] = {}
        for row in rows:
            thread = row["thread_id"]
            counts[thread] = counts.get(thread, 0) + 1
            for follower in list(self._followers.get(thread, ())):
                if row["id"] > follower.after:
                    self._deliver(thread, follower, row)
        return any(n >= PER_THREAD for n in counts.values())

    def _deliver(self, thread: str, follower: _Follower, row: dict[str, Any]) -> None:
        follower.after = row["id"]
        if follower.queue.qsize() >= BEHIND_LIMIT:
            self._followers[thread].discard(follower)
            follower.queue.put_nowait(None)  # ends its stream; it comes back from its last id
            return
        follower.queue.put_nowait({"id": row["id"], "kind": row["kind"], "data": row["data"]})
