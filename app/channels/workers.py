"""The channels' two background loops, in every replica: the inbox (turns for stored
messages) and the outbox (answers sent back). Both claim rows in the database with FOR
UPDATE SKIP LOCKED, so any replica may take any row and any replica may die; a route that
stores a message nudges its own process's inbox so the turn starts at once.
"""

from __future__ import annotations

import asyncio
import contextlib
import time
from collections.abc import Callable
from dataclasses import dataclass
from functools import partial
from typing import Protocol

import structlog

from app.channels.store import ChannelStore, Inbound, Outbound
from app.channels.turns import TryLater
from app.errors import AppError
from app.retry import backoff_s

log = structlog.get_logger(__name__)

POLL_S = 1.0  # a message stored by another replica starts within about this long
BATCH = 10
MAX_TURNS = 32  # a replica's channel turns at once; the rest wait for another replica or later
MAX_ATTEMPTS = 8  # a message that fails this often (model or database away) is given up
MAX_SENDS = 12  # an answer refused this often (with backoff: about half an hour) is given up
HOUSEKEEPING_EVERY_S = 30.0
KEEP_S = 7 * 24 * 3600.0  # handled messages and sent answers, then deleted


class Adapter(Protocol):
    channel: str

    async def handle(self, item: Inbound) -> str:
        """Handle one stored message; the outcome recorded with it. TryLater: again later."""
        ...


@dataclass(frozen=True)
class Delivery:
    error: str | None = None  # None: delivered
    retry: bool = True  # on an error: worth another try (nothing was created there)


class Courier(Protocol):
    channel: str

    async def send(self, item: Outbound) -> Delivery: ...


class _Loop:
    """A background loop woken by `nudge` or every POLL_S."""

    def __init__(self) -> None:
        self._task: asyncio.Task[None] | None = None
        self._wake = asyncio.Event()

    def nudge(self) -> None:
        self._wake.set()

    def open(self) -> None:
        self._task = asyncio.create_task(self._forever())

    async def close(self) -> None:
        if self._task is not None:
            self._task.cancel()
            with contextlib.suppress(asyncio.CancelledError):
                await self._task
            self._task = None

    async def _forever(self) -> None:
        while True:
            busy = False
            try:
                busy = await self.round()
            except Exception as error:  # the database is away: next round
                log.warning("channel round failed", error_type=type(error).__name__)
            if not busy:
                with contextlib.suppress(TimeoutError):
                    await asyncio.wait_for(self._wake.wait(), POLL_S)
                self._wake.clear()

    async def round(self) -> bool:
        raise NotImplementedError


class InboxWorker(_Loop):
    def __init__(
        self,
        store: ChannelStore,
        adapters: list[Adapter],
        ttl_s: float,
        on_done: Callable[[], None] = lambda: None,
    ) -> None:
        super().__init__()
        self.on_done = on_done  # the outbox's nudge: a turn's answer goes out at once
        self.store = store
        self.adapters = {a.channel: a for a in adapters}
        self.ttl_s = ttl_s
        self._handling: dict[int, asyncio.Task[None]] = {}
        self._renew_at = 0.0

    async def round(self) -> bool:
        if time.monotonic() >= self._renew_at:  # the claims of turns still running
            self._renew_at = time.monotonic() + self.ttl_s / 3
            await self.store.extend_inbox(list(self._handling), self.ttl_s)
        room = min(BATCH, MAX_TURNS - len(self._handling))
        if room <= 0:
            return False
        items = await self.store.claim_inbox(list(self.adapters), room, self.ttl_s)
        for item in items:
            task = asyncio.create_task(self._handle(item))
            self._handling[item.id] = task
            task.add_done_callback(partial(self._handled, item.id))
        return bool(items)

    def _handled(self, inbound_id: int, _: asyncio.Task[None]) -> None:
        self._handling.pop(inbound_id, None)

    async def _handle(self, item: Inbound) -> None:
        bound = log.bind(channel=item.channel, inbound_id=item.id)
        adapter = self.adapters.get(item.channel)
        if adapter is None:  # this replica is not configured for it: another may be
            await self.store.retry_inbox(item.id, 5.0, "no_adapter")
            return
        try:
            outcome = await adapter.handle(item)
        except TryLater as later:
            if later.counts and item.attempts >= MAX_ATTEMPTS:
                bound.error("channel message given up", reason=later.reason)
                await self.store.finish_inbox(item.id, f"given_up:{later.reason}")
            else:
                bound.info("channel message deferred", reason=later.reason)
                await self.store.retry_inbox(
                    item.id, later.after_s, later.reason, counted=later.counts
                )
            self.nudge()
            return
        except AppError as refused:  # e.g. a deleted thread's message: never retried
            bound.warning("channel message refused", code=refused.code)
            await self.store.finish_inbox(item.id, f"refused:{refused.code}")
            return
        except Exception:
            bound.exception("channel message failed")
            if item.attempts >= MAX_ATTEMPTS:
                await self.store.finish_inbox(item.id, "given_up:internal_error")
            else:
                await self.store.retry_inbox(
                    item.id, backoff_s(item.attempts, base_s=2.0), "internal_error"
                )
            return
        await self.store.finish_inbox(item.id, outcome)
        self.on_done()
        self.nudge()  # the conversation's next message

    async def wait_idle(self, grace_s: float) -> None:
        tasks = list(self._handling.values())
        if tasks:
            await asyncio.wait(tasks, timeout=grace_s)


class OutboxWorker(_Loop):
    def __init__(
        self,
        store: ChannelStore,
        couriers: list[Courier],
        *,
        base_s: float,
        cap_s: float,
        send_timeout_s: float = 15.0,
    ) -> None:
        super().__init__()
        self.store = store
        self.couriers = {c.channel: c for c in couriers}
        self.base_s = base_s
        self.cap_s = cap_s
        self.send_timeout_s = send_timeout_s
        self._next_housekeeping = 0.0

    async def round(self) -> bool:
        if time.monotonic() >= self._next_housekeeping:
            self._next_housekeeping = time.monotonic() + HOUSEKEEPING_EVERY_S
            for row in await self.store.abandon_unknown(self.send_timeout_s * 4):
                log.error("channel send outcome unknown; not sent again", **row)
            await self.store.prune(KEEP_S)
        if not self.couriers:
            return False
        items = await self.store.claim_outbox(list(self.couriers), BATCH)
        await asyncio.gather(*(self._send(item) for item in items))
        return bool(items)

    async def _send(self, item: Outbound) -> None:
        courier = self.couriers[item.channel]
        try:
            async with asyncio.timeout(self.send_timeout_s):
                delivery = await courier.send(item)
        except TimeoutError:  # it may have arrived: not sent again
            delivery = Delivery("timed out: outcome unknown", retry=False)
        except Exception as error:
            delivery = Delivery(type(error).__name__, retry=True)
        if delivery.error is None:
            await self.store.delivered(item.id)
            return
        retry = delivery.retry and item.attempts < MAX_SENDS
        delay = backoff_s(item.attempts, self.base_s, self.cap_s) if retry else None
        log.warning(
            "channel send failed",
            channel=item.channel,
            answer_key=item.answer_key,
            attempts=item.attempts,
            error=delivery.error,
            retry_in_s=delay,
        )
        await self.store.failed(item.id, delivery.error, delay)
        self.nudge()
