"""The outbox: every message to a customer is recorded, in the transaction that decided to
send it, and delivered by the sender once that transaction has committed."""

from __future__ import annotations

from typing import Any

import structlog
from psycopg import AsyncConnection
from psycopg_pool import AsyncConnectionPool

from app.background import TaskSet
from app.notify.senders import Message, Sender

log = structlog.get_logger(__name__)

MASK = "••••••"
CLOSE_GRACE_S = 10.0


class Outbox:
    def __init__(self, pool: AsyncConnectionPool[Any], sender: Sender) -> None:
        self.pool = pool
        self.sender = sender
        self._deliveries = TaskSet()

    async def record(
        self,
        conn: AsyncConnection[Any],
        message: Message,
        *,
        secret: str | None = None,
        requested_by: str | None = None,
        thread_id: str | None = None,
    ) -> int:
        """Add the message to the outbox inside the caller's transaction. `secret` (a code)
        is kept in the row only when the outbox is the delivery (the log sender, dev)."""
        body = message.body
        if secret and not self.sender.records_only:
            body = body.replace(secret, MASK)
        cur = await conn.execute(
            "INSERT INTO outbox (recipient, subject, body, requested_by, thread_id) "
            "VALUES (%s, %s, %s, %s, %s) RETURNING id",
            (message.recipient, message.subject, body, requested_by, thread_id),
        )
        row = await cur.fetchone()
        assert row is not None
        return int(row["id"])

    def deliver_later(self, outbox_id: int, message: Message) -> None:
        """Deliver in the background: the caller's answer never waits for (or reveals) it."""
        self._deliveries.spawn(self._deliver(outbox_id, message), "outbox delivery")

    async def _deliver(self, outbox_id: int, message: Message) -> None:
        delivered = False
        try:
            await self.sender.send(message)
            delivered = True
        except Exception as error:
            log.warning("message delivery failed", outbox_id=outbox_id, error=type(error).__name__)
        try:
            async with self.pool.connection() as conn:
                if delivered:
                    await conn.execute(
                        "UPDATE outbox SET sent_at = now() WHERE id = %s", (outbox_id,)
                    )
                else:
                    await conn.execute(
                        "UPDATE outbox SET failed_at = now() WHERE id = %s", (outbox_id,)
                    )
        except Exception as error:
            log.warning(
                "could not record a delivery", outbox_id=outbox_id, error=type(error).__name__
            )

    async def aclose(self) -> None:
        """Let deliveries under way finish (for a while), then close the sender."""
        await self._deliveries.close(CLOSE_GRACE_S)
        await self.sender.aclose()


async def recent_messages(
    pool: AsyncConnectionPool[Any], requested_by: str, limit: int = 5
) -> list[dict[str, Any]]:
    """The newest messages one subject's conversations sent, newest first (dev page only)."""
    async with pool.connection() as conn:
        cur = await conn.execute(
            "SELECT thread_id, recipient, subject, body, created_at FROM outbox "
            "WHERE requested_by = %s ORDER BY id DESC LIMIT %s",
            (requested_by, limit),
        )
        return [dict(row) for row in await cur.fetchall()]
