"""The channels as the lifespan builds them: what is configured, its two workers."""

from __future__ import annotations

from collections.abc import AsyncIterator
from contextlib import asynccontextmanager
from dataclasses import dataclass
from typing import Any

from psycopg_pool import AsyncConnectionPool

from app.channels.chatwoot import ChatwootAdapter, ChatwootCourier
from app.channels.mail import EmailAdapter, SmtpCourier
from app.channels.store import ChannelStore
from app.channels.turns import ChannelTurns
from app.channels.workers import Adapter, Courier, InboxWorker, OutboxWorker
from app.config import Settings
from app.runs.service import RunService
from app.threads.control import Controls

SHUTDOWN_GRACE_S = 20.0


@dataclass
class Channels:
    settings: Settings
    pool: AsyncConnectionPool[Any]
    store: ChannelStore
    turns: ChannelTurns
    inbox: InboxWorker
    outbox: OutboxWorker

    @property
    def chatwoot_secret(self) -> str | None:
        secret = self.settings.chatwoot_webhook_secret
        if secret is None or not self.settings.chatwoot_base_url:
            return None
        return secret.get_secret_value()

    @property
    def email_secret(self) -> str | None:
        secret = self.settings.email_inbound_secret
        return secret.get_secret_value() if secret else None

    def stored(self) -> None:
        """A message was stored here: its turn starts now, not at the next poll."""
        self.inbox.nudge()


@asynccontextmanager
async def open_channels(
    settings: Settings, pool: AsyncConnectionPool[Any], runs: RunService, controls: Controls
) -> AsyncIterator[Channels]:
    store = ChannelStore(pool)
    turns = ChannelTurns(runs, controls, store)
    adapters: list[Adapter] = []
    couriers: list[Courier] = []
    chatwoot: ChatwootCourier | None = None
    if settings.chatwoot_base_url:
        adapters.append(ChatwootAdapter(store, pool, turns, settings.chatwoot_base_url))
        token = settings.chatwoot_bot_token
        if token is None:
            raise ValueError("CHATWOOT_BASE_URL needs CHATWOOT_BOT_TOKEN")
        chatwoot = ChatwootCourier(settings.chatwoot_base_url, token.get_secret_value())
        couriers.append(chatwoot)
    if settings.email_inbound_secret is not None:
        if settings.write_confirmation != "required":
            # An email's sender is not proven: only the reply to a confirmation proves it.
            raise ValueError("the email channel needs WRITE_CONFIRMATION=required")
        adapters.append(EmailAdapter(store, pool, turns, settings))
        couriers.append(SmtpCourier(settings))
    outbox = OutboxWorker(
        store,
        couriers,
        base_s=settings.channel_backoff_base_s,
        cap_s=settings.channel_backoff_cap_s,
    )
    inbox = InboxWorker(store, adapters, settings.channel_claim_ttl_s, on_done=outbox.nudge)
    if adapters:
        inbox.open()
        outbox.open()
    try:
        yield Channels(settings, pool, store, turns, inbox, outbox)
    finally:
        await inbox.wait_idle(SHUTDOWN_GRACE_S)
        await inbox.close()
        await outbox.close()
        if chatwoot is not None:
            await chatwoot.aclose()
