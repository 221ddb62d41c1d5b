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
from typing import Any

import psycopg
import structlog

from app.runs.repository import RunRepository
from app.runs.stream import Done, RunFailed, Sequenced, from_record, to_record

log = structlog.get_logger(__name__)

SHIP_EVERY_S = 0.1
FOLLOW_POLL_S = 0.1
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


async def follow_stored(
    repo: RunRepository, thread_id: str, run_id: str, after: int
) -> AsyncIterator[list[Sequenced]]:
    """A run of another replica (or a finished one): its stored log after `after`, then,
    while it runs, each chunk its owner ships, until `done`. A database that goes away
    under it for longer than FOLLOW_OUTAGE_S ends the stream without `done`, as a cut
    connection does: the client follows again from its last id (README "Runs you can come
    back to"), instead of an error escaping into the ASGI server half-way through a body."""
    outage_since: float | None = None
    while True:
        try:
            async for batch in _follow_stored(repo, thread_id, run_id, after):
                yield batch
                after = batch[-1][0]
            return
        except psycopg.OperationalError as error:  # a pool timeout too
            if outage_since is None:
                outage_since = time.monotonic()
                log.warning("database unavailable under a follow", error_type=type(error).__name__)
            elif time.monotonic() - outage_since >= FOLLOW_OUTAGE_S:
                return
        await asyncio.sleep(FOLLOW_POLL_S * 5)


async def _follow_stored(
    repo: RunRepository, thread_id: str, run_id: str, after: int
) -> AsyncIterator[list[Sequenced]]:
    asked = False
    while True:
        row = await repo.run(thread_id, run_id)
        if row is None:
            return
        if row["status"] == "running" and not row["held"]:
            # Recorded as running, yet no live lease: its process died. The next claim of
            # the thread closes it as abandoned; the reader hears it now.
            row = {**row, "status": "abandoned"}
        if row["status"] != "running":
            ending = _ending(row, after)
            if ending:
                yield ending
            return
        if not asked:
            asked = await repo.request(thread_id, run_id, "tail")
        stored = increasing(map(from_record, await repo.events_after(run_id, after)))
        batch = [e for e in stored if e[0] > after]
        if batch:
            after = batch[-1][0]
            yield batch
        await asyncio.sleep(FOLLOW_POLL_S)
