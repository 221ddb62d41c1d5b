"""A run's event log beyond its own process: shipped while it runs, read from any replica.

The owner keeps the log in memory (`Run.log`) and stores what was not shipped yet as the
last chunk, in the statement that records the run's outcome. While the run goes on, the log
is shipped in chunks, every `SHIP_EVERY_S` (at most one
insert per interval, however many tokens), but only once a reader may need it elsewhere:
the run's own client went away, or another replica asked to follow it. A turn whose client
stays connected to the replica that runs it writes no chunks at all.
"""

from __future__ import annotations

import asyncio
import contextlib
import time
from collections.abc import AsyncIterator, Callable, Iterable
from dataclasses import dataclass, field
from typing import Any

import psycopg
import structlog

from app.background import Loop
from app.runs.repository import RunRepository
from app.runs.stream import Done, RunFailed, Sequenced, from_record, to_record

log = structlog.get_logger(__name__)

SHIP_EVERY_S = 0.1
FOLLOW_POLL_S = 0.1  # without LISTEN
FOLLOW_FALLBACK_S = 0.5  # with LISTEN: a lost notification, or a dead owner's lease expiring
FOLLOW_OUTAGE_S = 5.0  # a follow outlives a database blip this long, then ends (no `done`)
RUN_LOST = "The reply was lost when the server running it stopped; please send it again."


def records(events: list[Sequenced]) -> list[list[Any]]:
    """The log as stored: every event but `done` (rebuilt from the run's row)."""
    return [to_record(seq, event) for seq, event in events if not isinstance(event, Done)]


class LogShipper:
    """Ships one run's log in chunks from the first call of `start` until the run ends."""

    def __init__(
        self, repo: RunRepository, run_id: str, take: Callable[[int], list[Sequenced]]
    ) -> None:
        self.repo = repo
        self.run_id = run_id
        self._take = take  # the log from an index on (no token joins what it returns)
        self.shipped = 0
        self._task: asyncio.Task[None] | None = None

    def start(self) -> None:
        if self._task is None:
            self._task = asyncio.create_task(self._ship_until_done())

    async def stop(self) -> None:
        if self._task is not None:
            self._task.cancel()
            with contextlib.suppress(asyncio.CancelledError):
                await self._task

    async def _ship_until_done(self) -> None:
        while True:
            events = self._take(self.shipped)
            upto = self.shipped + len(events)
            chunk = records(events)
            if chunk:
                try:
                    await self.repo.append_events(self.run_id, chunk)
                    self.shipped = upto
                except Exception as error:  # the next interval tries again
                    log.warning("could not ship a run's events", error_type=type(error).__name__)
            elif upto > self.shipped:
                self.shipped = upto  # only `done`
            await asyncio.sleep(SHIP_EVERY_S)


def increasing(events: Iterable[Sequenced]) -> list[Sequenced]:
    """Each id once, in order: a chunk shipped while its run was stopping may overlap the
    one stored with the outcome."""
    out: list[Sequenced] = []
    for seq, event in events:
        if not out or seq > out[-1][0]:
            out.append((seq, event))
    return out


def _ending(row: dict[str, Any], after: int) -> list[Sequenced]:
    """The rest of a finished run's stored log, then its `done`."""
    stored = increasing(from_record(r) for r in row["events"] or [])
    last = stored[-1][0] if stored else after
    done = Done(status=row["status"], checkpoint_id=row["checkpoint_id"], usage=row["usage"] or {})
    out = [(seq, event) for seq, event in stored if seq > after]
    if row["status"] == "abandoned":
        # Its owner died with events only its own client heard (the log ships every
        # SHIP_EVERY_S): what is said now goes after the last id this reader heard.
        last = max(last, after)
        out.append((last + 1, RunFailed(code="run_lost", message=RUN_LOST)))
        last += 1
    if last + 1 > after:
        out.append((last + 1, done))
    return out


@dataclass(eq=False)
class _Reader:
    after: int
    queue: asyncio.Queue[list[Sequenced] | BaseException | None] = field(
        default_factory=asyncio.Queue
    )


class RunLogFeed:
    """The stored logs of runs another replica runs (or that ended), for this process's
    readers: one poller asks for every followed run in one query (status, liveness, the
    chunks after the furthest-behind reader), as the thread feed does for the threads
    (app/threads/feed.py), instead of two queries per reader every FOLLOW_POLL_S. Woken by
    `cs_run_events` (app/db/listen.py: a chunk shipped, or a run closed, that a reader asked
    to follow) and by a reader that starts; no query while nobody follows."""

    def __init__(self, repo: RunRepository, poll_s: float = FOLLOW_POLL_S) -> None:
        self.repo = repo
        self._readers: dict[tuple[str, str], set[_Reader]] = {}
        self._asked: set[tuple[str, str]] = set()  # runs whose owner was asked to ship
        self._outage_since: float | None = None
        self.loop = Loop(
            "run logs",
            self.poll,
            poll_s,
            when=lambda: bool(self._readers),
            jitter=False,
            fallback_s=FOLLOW_FALLBACK_S,
        )

    async def follow(
        self, thread_id: str, run_id: str, after: int
    ) -> AsyncIterator[list[Sequenced]]:
        """A run of another replica (or a finished one): its stored log after `after`,
        then, while it runs, each chunk its owner ships, until `done`. A database that goes
        away under it for longer than FOLLOW_OUTAGE_S ends the stream without `done`, as a
        cut connection does: the client follows again from its last id (docs/http-api.md),
        instead of an error escaping into the ASGI server half-way through a body."""
        key = (thread_id, run_id)
        reader = _Reader(after)
        self._readers.setdefault(key, set()).add(reader)
        self.loop.start()  # (once: the lifespan may have started it already)
        self.loop.wake()  # the first batch now, not at the next poll
        try:
            while (item := await reader.queue.get()) is not None:
                if isinstance(item, BaseException):
                    raise item
                yield item
        finally:
            self._drop(key, reader)

    async def close(self) -> None:
        await self.loop.stop()

    def _drop(self, key: tuple[str, str], reader: _Reader) -> None:
        readers = self._readers.get(key)
        if readers is not None:
            readers.discard(reader)
            if not readers:
                del self._readers[key]
                self._asked.discard(key)

    def _end(self, key: tuple[str, str], last: BaseException | None = None) -> None:
        for reader in self._readers.pop(key, set()):
            reader.queue.put_nowait(last)
        self._asked.discard(key)

    async def poll(self) -> None:
        """One query for every followed run; a database away ends the readers' streams
        after FOLLOW_OUTAGE_S."""
        try:
            await self._poll()
            self._outage_since = None
        except psycopg.OperationalError as error:  # a pool timeout too
            if self._outage_since is None:
                self._outage_since = time.monotonic()
                log.warning("database unavailable under a follow", error_type=type(error).__name__)
            elif time.monotonic() - self._outage_since >= FOLLOW_OUTAGE_S:
                for key in list(self._readers):
                    self._end(key)

    async def _poll(self) -> None:
        cursors = {k: min(r.after for r in rs) for k, rs in self._readers.items() if rs}
        if not cursors:
            return
        rows = await self.repo.logs_after([(t, r, a) for (t, r), a in cursors.items()])
        for row in rows:
            key = (row["thread_id"], row["run_id"])
            if key not in self._readers:
                continue  # its readers left meanwhile
            try:
                await self._serve(key, row)
            except psycopg.OperationalError:
                raise
            except Exception as error:  # this run's readers hear it, the others go on
                self._end(key, error)

    async def _serve(self, key: tuple[str, str], row: dict[str, Any]) -> None:
        thread_id, run_id = key
        if row["status"] is None:  # no such run (or its thread was deleted)
            self._end(key)
            return
        if row["status"] != "running" or not row["held"]:
            full = await self.repo.run(thread_id, run_id)  # the whole log, for `done`
            if full is None:
                self._end(key)
                return
            if full["status"] == "running" and not full["held"]:
                # Recorded as running, yet no live lease: its process died. The next claim
                # of the thread closes it as abandoned; the reader hears it now.
                full = {**full, "status": "abandoned"}
            if full["status"] != "running":
                for reader in self._readers.get(key, ()):
                    ending = _ending(full, reader.after)
                    if ending:
                        reader.queue.put_nowait(ending)
                self._end(key)
                return
        if key not in self._asked and await self.repo.request(thread_id, run_id, "tail"):
            self._asked.add(key)
        stored = increasing(map(from_record, row["events"] or []))
        for reader in self._readers.get(key, ()):
            batch = [e for e in stored if e[0] > reader.after]
            if batch:
                reader.after = batch[-1][0]
                reader.queue.put_nowait(batch)
