"""Webhooks: the events of `webhook_outbox` POSTed at least once. Handoff events (enqueued
by a trigger on the thread's stream, app/migrations/versions/0013) go to
HANDOFF_WEBHOOK_URL; a run's event (the LangGraph API's `webhook=URL`, enqueued by a
trigger on the run's end, 0020) goes to the URL its row names, checked again at each send
(app/notify/destinations.py), its body rendered at the first try by `render` (the API's
shape, with the state's values) and kept, so every retry sends the same bytes.

Every replica runs a `WebhookWorker`. It claims due rows with FOR UPDATE SKIP LOCKED in one
short statement that also pushes the row's next attempt past the delivery's timeout (a
lease: a replica that dies mid-delivery leaves the row due again), sends with no
transaction open, and records the outcome. Nothing depends on a pooled connection's session,
so it works through PgBouncer in transaction mode. A thread's events go out in order: a row
is due only when no earlier row of its thread for the same destination is still pending.

Signed as Standard Webhooks (standardwebhooks.com) does: `webhook-id` (the event's id, the
same on every retry), `webhook-timestamp` (seconds, this attempt) and `webhook-signature:
v1,<base64 HMAC-SHA256 of "{id}.{timestamp}.{body}">`. Run webhooks are signed with
RUN_WEBHOOK_SECRET, or without one with a secret generated once and kept in `webhook_keys`.
"""

from __future__ import annotations

import asyncio
import base64
import dataclasses
import hashlib
import hmac
import json
import secrets
import time
from collections.abc import Awaitable, Callable
from dataclasses import dataclass
from typing import Any

import httpx
import structlog
from psycopg.types.json import Jsonb
from psycopg_pool import AsyncConnectionPool

from app.background import Loop
from app.config import DEV_SECRET, WEBHOOK_SECRET_PREFIX, Settings, webhook_signing_key
from app.jsonbytes import json_bytes
from app.notify.destinations import HostPolicy, RefusedDestination, resolve
from app.retry import backoff_s

log = structlog.get_logger(__name__)

POLL_S = 1.0  # without LISTEN: an event's first try starts within about this long
FALLBACK_S = 30.0  # with LISTEN (cs_webhooks wakes the loop; a retry wakes it when due)
BATCH = 20  # rows claimed (and sent concurrently) per statement
LEASE_MARGIN_S = 10.0  # a claimed row is due again this long after its timeout
GIVE_UP_AFTER_S = 24 * 3600.0  # an event failing for a day is given up
KEEP_S = 7 * 24 * 3600.0  # delivered and given-up rows are deleted after this
HOUSEKEEPING_EVERY_S = 300.0
USER_AGENT = "cs-agent-webhooks"
RUN_KEY_NAME = "runs"

# A run's row (its thread id and what the trigger stored) -> the body to send.
Render = Callable[[str, dict[str, Any]], Awaitable[dict[str, Any]]]

_PENDING = "delivered_at IS NULL AND failed_at IS NULL"
_CLAIM = """WITH due AS (
        SELECT w.id FROM webhook_outbox w
        WHERE w.delivered_at IS NULL AND w.failed_at IS NULL AND w.next_attempt_at <= now()
          AND (CASE WHEN w.url IS NULL THEN %(handoff)s ELSE %(runs)s END)
          AND NOT EXISTS (SELECT 1 FROM webhook_outbox e
                          WHERE e.thread_id = w.thread_id AND e.id < w.id
                            AND e.url IS NOT DISTINCT FROM w.url
                            AND e.delivered_at IS NULL AND e.failed_at IS NULL)
        ORDER BY w.id LIMIT %(batch)s FOR UPDATE SKIP LOCKED)
    UPDATE webhook_outbox w SET attempts = w.attempts + 1,
        next_attempt_at = now() + %(lease_s)s * interval '1 second'
    FROM due WHERE w.id = due.id
    RETURNING w.id, w.event_id, w.thread_id, w.type, w.attempts, w.url, w.rendered,
        w.payload::text AS body"""
_RENDERED = """UPDATE webhook_outbox SET payload = %s, rendered = true WHERE id = %s
    RETURNING payload::text AS body"""
_REFUSED = """UPDATE webhook_outbox SET failed_at = now(), last_error = %s WHERE id = %s"""
# The run webhooks' generated secret: the first replica to need it makes it.
_RUN_KEY = f"""WITH made AS (
        INSERT INTO webhook_keys (name, secret) VALUES ('{RUN_KEY_NAME}', %s)
        ON CONFLICT (name) DO NOTHING RETURNING secret)
    SELECT secret FROM made UNION ALL
    SELECT secret FROM webhook_keys WHERE name = '{RUN_KEY_NAME}' LIMIT 1"""
_DELIVERED = """UPDATE webhook_outbox SET delivered_at = now(), last_status = %s,
    last_error = NULL WHERE id = %s"""
_FAILED = """UPDATE webhook_outbox SET last_status = %(status)s, last_error = %(error)s,
        next_attempt_at = now() + %(delay_s)s * interval '1 second',
        failed_at = CASE WHEN created_at < now() - %(give_up_s)s * interval '1 second'
                         THEN now() END
    WHERE id = %(id)s RETURNING failed_at IS NOT NULL AS given_up"""
# Given up on, or kept long enough: bounded batches, never waiting for a row another
# replica holds. With the webhooks off, the rows the trigger still writes go the same way.
_GIVE_UP = f"""UPDATE webhook_outbox SET failed_at = now(), last_error = 'given up'
    WHERE id IN (SELECT id FROM webhook_outbox WHERE {_PENDING}
                   AND created_at < now() - %(give_up_s)s * interval '1 second'
                 ORDER BY id LIMIT 1000 FOR UPDATE SKIP LOCKED)"""
_PRUNE = """DELETE FROM webhook_outbox
    WHERE id IN (SELECT id FROM webhook_outbox
                 WHERE created_at < now() - %(keep_s)s * interval '1 second'
                 ORDER BY id LIMIT 1000 FOR UPDATE SKIP LOCKED)"""


def _dumps(value: Any) -> bytes | str:
    return json_bytes(value) or json.dumps(value, default=str)


def signature(key: bytes, event_id: str, timestamp: int, body: bytes) -> str:
    """The `webhook-signature` header value (Standard Webhooks, version 1)."""
    signed = f"{event_id}.{timestamp}.".encode() + body
    digest = hmac.new(key, signed, hashlib.sha256).digest()
    return "v1," + base64.b64encode(digest).decode()


@dataclass(frozen=True)
class Claimed:
    id: int
    event_id: str
    thread_id: str
    type: str
    attempts: int
    body: bytes
    url: str | None = None  # a run's webhook; None: the handoff URL
    rendered: bool = True


@dataclass(frozen=True)
class Outcome:
    status: int | None  # the HTTP status, None when no answer came
    error: str | None  # None: delivered
    final: bool = False  # refused by policy: given up at once, never retried

    @property
    def delivered(self) -> bool:
        return self.error is None


class WebhookWorker:
    def __init__(
        self,
        pool: AsyncConnectionPool[Any],
        settings: Settings,
        client: httpx.AsyncClient | None = None,
        render: Render | None = None,
    ) -> None:
        self.pool = pool
        self.url = settings.handoff_webhook_url
        self.render = render  # None: run webhooks are left to a worker that can render them
        self.policy = HostPolicy.parse(settings.webhook_allowed_hosts)
        run_secret = settings.run_webhook_secret
        self._run_key = webhook_signing_key(run_secret.get_secret_value()) if run_secret else None
        secret = settings.handoff_webhook_secret
        self.key = webhook_signing_key(secret.get_secret_value() if secret else DEV_SECRET)
        self.timeout_s = settings.handoff_webhook_timeout_s
        self.base_s = settings.handoff_webhook_backoff_base_s
        self.cap_s = settings.handoff_webhook_backoff_cap_s
        self._client = client
        self.delivery: Loop | None = None  # set by `loops`
        if self.url and secret is None:
            log.warning("HANDOFF_WEBHOOK_SECRET unset: webhooks signed with the dev secret")

    @property
    def enabled(self) -> bool:
        return self.url is not None

    async def open(self) -> None:
        if self._client is None:
            self._client = httpx.AsyncClient(timeout=self.timeout_s, follow_redirects=False)

    def loops(self) -> list[Loop]:
        """Delivery (woken by `cs_webhooks`; a full round runs again at once) and the daily
        housekeeping, on the process's background mechanism."""
        self.delivery = Loop(
            "webhook delivery",
            self.deliver_due,
            POLL_S,
            when=lambda: self.enabled or self.render is not None,
            fallback_s=FALLBACK_S,
        )
        return [self.delivery, Loop("webhook housekeeping", self.housekeep, HOUSEKEEPING_EVERY_S)]

    async def close(self) -> None:
        if self.delivery is not None:  # no delivery with the client closed under it
            await self.delivery.stop()
        if self._client is not None:
            await self._client.aclose()
            self._client = None

    async def deliver_due(self) -> int:
        """One round: claim the due events, send them, record each outcome. Returns how
        many were claimed."""
        lease_s = self.timeout_s + LEASE_MARGIN_S
        async with self.pool.connection() as conn:
            cur = await conn.execute(
                _CLAIM,
                {
                    "batch": BATCH,
                    "lease_s": lease_s,
                    "handoff": self.enabled,
                    "runs": self.render is not None,
                },
            )
            rows = await cur.fetchall()
        claimed = [
            Claimed(
                id=int(r["id"]),
                event_id=r["event_id"],
                thread_id=r["thread_id"],
                type=r["type"],
                attempts=int(r["attempts"]),
                body=r["body"].encode(),
                url=r["url"],
                rendered=bool(r["rendered"]),
            )
            for r in rows
        ]
        outcomes = await asyncio.gather(*(self._send_any(c) for c in claimed))
        for event, outcome in zip(claimed, outcomes, strict=True):
            await self._record(event, outcome)
        return len(claimed)

    async def _send_any(self, event: Claimed) -> Outcome:
        if event.url is None:
            return await self.send(event)
        try:
            return await self.send_run(event)
        except Exception as error:  # the render's database read failed: retried
            return Outcome(None, type(error).__name__)

    async def send(self, event: Claimed) -> Outcome:
        assert self.url is not None
        return await self._post(self.url, event, self.key, {}, {})

    async def send_run(self, event: Claimed) -> Outcome:
        """A run's event: its body rendered at the first try (while the run's log is still
        kept) and stored, its URL checked and resolved again now, sent to the address
        checked. A URL refused now is given up; a name that does not resolve, retried."""
        url = event.url
        assert url is not None and self.render is not None
        if not event.rendered:
            body = await self.render(event.thread_id, json.loads(event.body))
            async with self.pool.connection() as conn:
                cur = await conn.execute(_RENDERED, (Jsonb(body, dumps=_dumps), event.id))
                row = await cur.fetchone()
            if row is None:  # the thread was deleted meanwhile, and its events with it
                return Outcome(None, "deleted", final=True)
            event = dataclasses.replace(event, body=row["body"].encode(), rendered=True)
        try:
            destination = await resolve(url, self.policy)
        except RefusedDestination as refused:
            return Outcome(None, refused.reason, final=refused.lasting)
        headers = {"host": destination.host_header}
        extensions = {"sni_hostname": destination.host} if url.startswith("https") else {}
        return await self._post(destination.url, event, await self.run_key(), headers, extensions)

    async def run_key(self) -> bytes:
        """RUN_WEBHOOK_SECRET's key, or the generated one every replica shares."""
        if self._run_key is None:
            made = WEBHOOK_SECRET_PREFIX + base64.b64encode(secrets.token_bytes(32)).decode()
            async with self.pool.connection() as conn:
                cur = await conn.execute(_RUN_KEY, (made,))
                row = await cur.fetchone()
            assert row is not None
            self._run_key = webhook_signing_key(row["secret"])
        return self._run_key

    async def _post(
        self,
        url: str,
        event: Claimed,
        key: bytes,
        headers: dict[str, str],
        extensions: dict[str, Any],
    ) -> Outcome:
        assert self._client is not None
        timestamp = int(time.time())
        headers = {
            **headers,
            "content-type": "application/json",
            "user-agent": USER_AGENT,
            "webhook-id": event.event_id,
            "webhook-timestamp": str(timestamp),
            "webhook-signature": signature(key, event.event_id, timestamp, event.body),
        }
        try:
            response = await self._client.post(
                url, content=event.body, headers=headers, extensions=extensions
            )
        except Exception as error:  # refused, timed out, a bad URL: retried all the same
            return Outcome(None, type(error).__name__)
        if 200 <= response.status_code < 300:
            return Outcome(response.status_code, None)
        return Outcome(response.status_code, f"HTTP {response.status_code}")

    async def _record(self, event: Claimed, outcome: Outcome) -> None:
        async with self.pool.connection() as conn:
            if outcome.delivered:
                await conn.execute(_DELIVERED, (outcome.status, event.id))
                return
            if outcome.final:
                await conn.execute(_REFUSED, (outcome.error, event.id))
                log.warning(
                    "webhook refused; given up",
                    event_id=event.event_id,
                    event_type=event.type,
                    thread_id=event.thread_id,
                    error=outcome.error,
                )
                return
            delay_s = backoff_s(event.attempts, self.base_s, self.cap_s)
            cur = await conn.execute(
                _FAILED,
                {
                    "id": event.id,
                    "status": outcome.status,
                    "error": outcome.error,
                    "delay_s": delay_s,
                    "give_up_s": GIVE_UP_AFTER_S,
                },
            )
            row = await cur.fetchone()
        given_up = bool(row and row["given_up"])
        if not given_up and self.delivery is not None:  # no NOTIFY says a retry is due
            asyncio.get_running_loop().call_later(delay_s, self.delivery.wake)
        log.warning(
            "webhook given up" if given_up else "webhook failed; retrying",
            event_id=event.event_id,
            event_type=event.type,
            thread_id=event.thread_id,
            attempts=event.attempts,
            status=outcome.status,
            error=outcome.error,
            retry_in_s=None if given_up else delay_s,
        )

    async def housekeep(self) -> None:
        async with self.pool.connection() as conn:
            await conn.execute(_GIVE_UP, {"give_up_s": GIVE_UP_AFTER_S})
            await conn.execute(_PRUNE, {"keep_s": KEEP_S})
