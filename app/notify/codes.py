"""One-time codes that prove a guest is the customer they named.

A lookup starts a code for the conversation whether or not it matched anyone: a decoy row
(no customer, a code nobody receives) answers and counts attempts exactly like a real one,
so a guest learns nothing from trying emails. A code is stored as HMAC-SHA256(key, salt ||
code), expires, and allows a few attempts; a new lookup replaces the conversation's code.
"""

from __future__ import annotations

import hashlib
import hmac
import re
import secrets
from collections.abc import AsyncIterator
from contextlib import asynccontextmanager
from dataclasses import dataclass
from typing import Any

import structlog
from psycopg import AsyncConnection
from psycopg_pool import AsyncConnectionPool

from app.config import Settings
from app.notify.outbox import Outbox
from app.notify.senders import LogSender, Message, sender_from

log = structlog.get_logger(__name__)

CODE_DIGITS = 6
LOCK_CLASS = 18  # pg_advisory_xact_lock(18, hash of the requester): one start at a time
_NOT_DIGIT = re.compile(r"[^0-9]")
# The codes sent this hour, per requester or per customer.
_CODES_THIS_HOUR = {
    column: f"""SELECT count(*) AS n FROM identity_codes WHERE {column} = %s
        AND created_at > now() - interval '1 hour'"""
    for column in ("requested_by", "customer_id")
}


@dataclass(frozen=True)
class CodePolicy:
    ttl_s: int = 600
    max_attempts: int = 5
    per_hour: int = 5  # codes one guest may ask for, and codes sent to one customer

    @classmethod
    def from_settings(cls, settings: Settings) -> CodePolicy:
        return cls(
            ttl_s=settings.identity_code_ttl_s,
            max_attempts=settings.identity_code_max_attempts,
            per_hour=settings.identity_codes_per_hour,
        )

    @property
    def minutes(self) -> int:
        return max(1, self.ttl_s // 60)


@dataclass(frozen=True)
class Check:
    """What a typed code proved: `customer_id` only when it was right."""

    customer_id: str | None
    attempts_left: int
    active: bool  # False: the conversation had no live code to check


def code_key(secret: str) -> bytes:
    """The HMAC key for codes, derived from the JWT secret so every replica agrees."""
    return hmac.new(secret.encode(), b"cs-agent identity codes", hashlib.sha256).digest()


def code_message(recipient: str, code: str, policy: CodePolicy) -> Message:
    return Message(
        recipient=recipient,
        subject="Your verification code",
        body=(
            f"Your verification code is {code}. It is valid for {policy.minutes} minutes.\n\n"
            "Give it only to our customer service chat, and only if you asked for it. If you "
            "did not, ignore this email: nobody can use your account without this code."
        ),
    )


class IdentityCodes:
    def __init__(
        self,
        pool: AsyncConnectionPool[Any],
        outbox: Outbox,
        key: bytes,
        policy: CodePolicy | None = None,
    ) -> None:
        self.pool = pool
        self.outbox = outbox
        self.key = key
        self.policy = policy or CodePolicy()

    def _digest(self, salt: bytes, code: str) -> bytes:
        return hmac.new(self.key, salt + code.encode(), hashlib.sha256).digest()

    async def start(self, *, thread_id: str, requested_by: str, customer_id: str | None) -> bool:
        """Give the conversation a new code, sent to `customer_id`'s registered email (a
        decoy when None). False when this guest has asked for too many codes this hour."""
        code = f"{secrets.randbelow(10**CODE_DIGITS):0{CODE_DIGITS}d}"
        salt = secrets.token_bytes(16)
        digest = self._digest(salt, code)
        sent: tuple[int, Message] | None = None
        async with self.pool.connection() as conn, conn.transaction():
            await conn.execute(
                "SELECT pg_advisory_xact_lock(%s, hashtext(%s))", (LOCK_CLASS, requested_by)
            )
            if await self._codes_this_hour(conn, "requested_by", requested_by) >= (
                self.policy.per_hour
            ):
                log.warning("identity codes: too many requests", thread_id=thread_id)
                return False
            await conn.execute(
                "UPDATE identity_codes SET closed_at = now() "
                "WHERE thread_id = %s AND closed_at IS NULL",
                (thread_id,),
            )
            recipient = await self._recipient(conn, customer_id) if customer_id else None
            await conn.execute(
                "DELETE FROM identity_codes WHERE expires_at < now() - interval '1 day'"
            )
            await conn.execute(
                "INSERT INTO identity_codes (thread_id, requested_by, customer_id, salt, "
                "code_hash, max_attempts, expires_at) "
                "VALUES (%s, %s, %s, %s, %s, %s, now() + make_interval(secs => %s))",
                (
                    thread_id,
                    requested_by,
                    customer_id if recipient else None,
                    salt,
                    digest,
                    self.policy.max_attempts,
                    self.policy.ttl_s,
                ),
            )
            if recipient:
                message = code_message(recipient, code, self.policy)
                outbox_id = await self.outbox.record(
                    conn, message, secret=code, requested_by=requested_by, thread_id=thread_id
                )
                sent = (outbox_id, message)
        log.info("identity code started", thread_id=thread_id, sent=sent is not None)
        if sent:
            self.outbox.deliver_later(*sent)
        return True

    async def confirm(self, *, thread_id: str, code: str) -> Check:
        """Check a typed code against the conversation's live code; every check is an
        attempt, and a right code, or the last attempt, closes it."""
        typed = _NOT_DIGIT.sub("", code)
        async with self.pool.connection() as conn, conn.transaction():
            cur = await conn.execute(
                "SELECT id, customer_id, salt, code_hash, attempts, max_attempts, "
                "expires_at > now() AS live FROM identity_codes "
                "WHERE thread_id = %s AND closed_at IS NULL ORDER BY id DESC LIMIT 1 FOR UPDATE",
                (thread_id,),
            )
            row = await cur.fetchone()
            if row is None:
                return Check(customer_id=None, attempts_left=0, active=False)
            if not row["live"]:
                await conn.execute(
                    "UPDATE identity_codes SET closed_at = now() WHERE id = %s", (row["id"],)
                )
                return Check(customer_id=None, attempts_left=0, active=False)
            attempts = row["attempts"] + 1
            matches = hmac.compare_digest(
                self._digest(bytes(row["salt"]), typed), bytes(row["code_hash"])
            )
            customer_id = row["customer_id"] if matches else None
            left = 0 if customer_id else max(row["max_attempts"] - attempts, 0)
            await conn.execute(
                "UPDATE identity_codes SET attempts = %s, "
                "closed_at = CASE WHEN %s THEN now() END, "
                "verified_at = CASE WHEN %s THEN now() END WHERE id = %s",
                (attempts, bool(customer_id) or left == 0, bool(customer_id), row["id"]),
            )
        log.info("identity code checked", thread_id=thread_id, verified=bool(customer_id))
        return Check(customer_id=customer_id, attempts_left=left, active=True)

    async def _recipient(self, conn: AsyncConnection[Any], customer_id: str) -> str | None:
        """The customer's registered email; None once they were sent enough codes this hour
        (the lookup then proceeds as a decoy, so the guest cannot tell)."""
        cur = await conn.execute("SELECT email FROM customers WHERE id = %s", (customer_id,))
        row = await cur.fetchone()
        if row is None or not row["email"]:
            return None
        if await self._codes_this_hour(conn, "customer_id", customer_id) >= self.policy.per_hour:
            log.warning("identity codes: customer sent enough codes this hour")
            return None
        return str(row["email"])

    async def _codes_this_hour(self, conn: AsyncConnection[Any], column: str, value: str) -> int:
        cur = await conn.execute(_CODES_THIS_HOUR[column], (value,))
        row = await cur.fetchone()
        return int(row["n"]) if row else 0


def default_identity_codes(pool: AsyncConnectionPool[Any]) -> IdentityCodes:
    """For tools built without the lifespan (tests, benchmarks): the log sender, and a key
    of this process only."""
    return IdentityCodes(pool, Outbox(pool, LogSender()), secrets.token_bytes(32))


@asynccontextmanager
async def open_identity_codes(
    settings: Settings, pool: AsyncConnectionPool[Any]
) -> AsyncIterator[IdentityCodes]:
    """The configured sender and outbox; deliveries under way finish before it closes."""
    outbox = Outbox(pool, sender_from(settings))
    try:
        key = code_key(settings.jwt_secret.get_secret_value())
        yield IdentityCodes(pool, outbox, key, CodePolicy.from_settings(settings))
    finally:
        await outbox.aclose()
