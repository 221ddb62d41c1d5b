"""A run: one turn (or one resume) of a thread, and its event log in memory.

A run executes in a background task that appends to its log (`Run.emit`). The HTTP
response is one reader of it, so a client that goes away never cancels a run half-way: the
run finishes, its writes are recorded, the lease is released, and `GET /state` shows the
outcome.

Tokens are merged as they come: a token arriving while the log's last event is a token of
the same message that no reader has taken yet joins it. That is the frame the SSE would
have sent anyway (it sends what queued up since its last write), so the log holds as many
records as frames went out, ids stay dense, and a reader resuming after any id it saw has
seen every piece before it.
"""

from __future__ import annotations

import asyncio
import contextlib
import uuid
from collections.abc import AsyncIterator
from dataclasses import dataclass, field
from typing import Any

from app.fencing import Lease, RunControl
from app.runs.logs import LogShipper
from app.runs.stream import Done, Sequenced, StreamEvent, Token, joined

# The id of the human message a client_message_id opens a turn with, the same on every
# retry: the turn's idempotency keys (app/db/idempotency.py) follow from it, so a write
# a retried turn repeats is replayed from its record instead of running twice.
MESSAGE_ID_NAMESPACE = uuid.UUID("6f0b7a44-5d2e-4c55-9d0e-7f3c1c1d2a90")


def human_message_id(thread_id: str, client_message_id: str | None) -> str:
    if client_message_id is None:
        return str(uuid.uuid4())
    return str(uuid.uuid5(MESSAGE_ID_NAMESPACE, f"{thread_id}\n{client_message_id}"))


@dataclass
class Run:
    run_id: str
    thread_id: str
    session_id: str
    user_id: str = ""
    lease: Lease | None = None
    start_checkpoint_id: str | None = None  # the checkpoint the run started from
    checkpoint_row: dict[str, Any] | None = None  # that checkpoint, as the claim read it
    policy_version: int | None = None  # the thread's pinned rules, as the claim read them
    log: list[Sequenced] = field(default_factory=list)  # every event so far, ids 1, 2, ...
    result: dict[str, Any] | None = None
    finished: asyncio.Event = field(default_factory=asyncio.Event)
    lease_lost: bool = False
    cancel_requested: bool = False
    task: asyncio.Task[None] | None = None
    in_graph: bool = False  # while the graph runs, a lost lease or a cancel stops it
    control: RunControl = field(default_factory=RunControl)
    shipper: LogShipper | None = None  # set once someone may read the log from elsewhere
    delivered: int = 0  # events handed to a reader or the shipper (never merged into)
    _appended: asyncio.Event = field(default_factory=asyncio.Event)

    def emit(self, event: StreamEvent) -> None:
        log = self.log
        if len(log) > self.delivered and (merged := joined(log[-1][1], event)) is not None:
            log[-1] = (log[-1][0], merged)
        else:
            log.append((len(log) + 1, event))
        # Wake every reader waiting now; later ones wait on a fresh event.
        woken, self._appended = self._appended, asyncio.Event()
        woken.set()

    def take(self, start: int) -> list[Sequenced]:
        """The events from index `start` on, marked as delivered (no token joins them)."""
        self.delivered = max(self.delivered, len(self.log))
        return self.log[start:]

    def unshipped(self) -> list[Sequenced]:
        """The events not shipped yet: stored with the run's outcome."""
        return self.log[self.shipper.shipped if self.shipper is not None else 0 :]

    @property
    def ended(self) -> bool:
        return bool(self.log) and isinstance(self.log[-1][1], Done)

    async def follow(self, after: int = 0, frame_s: float = 0.0) -> AsyncIterator[list[Sequenced]]:
        """The events after id `after`, as they come: each batch is everything appended
        since the last one, until `done`. Any number of readers may follow one run; one
        that leaves before the end gets the log shipped, so it can come back anywhere.

        `frame_s` (SSE_FRAME_MS): a token that follows a token waits up to that long for
        the next ones to join its frame (`emit` merges them), so a model at 40 tokens a
        second sends half the frames; a reader cannot see 30 ms. The first token of an
        answer and any other event go at once, and so does a held token when one arrives."""
        cursor = after
        streaming = False  # the last batch sent ended with a token
        try:
            while True:
                appended = self._appended
                if cursor < len(self.log):
                    if streaming and frame_s > 0:
                        await self._gather_tokens(frame_s)
                    batch = self.take(cursor)
                    cursor = len(self.log)
                    yield batch
                    last = batch[-1][1]
                    if isinstance(last, Done):
                        return
                    streaming = isinstance(last, Token)
                    continue
                if self.ended:
                    return
                await appended.wait()
        finally:
            if not self.ended and self.shipper is not None:
                self.shipper.start()

    async def _gather_tokens(self, frame_s: float) -> None:
        """Wait up to `frame_s` while the log ends with a token (more may join it)."""
        loop = asyncio.get_running_loop()
        deadline = loop.time() + frame_s
        while isinstance(self.log[-1][1], Token) and (left := deadline - loop.time()) > 0:
            appended = self._appended
            with contextlib.suppress(TimeoutError):
                async with asyncio.timeout(left):
                    await appended.wait()
