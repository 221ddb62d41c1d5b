"""Every query of the channels: conversations, the inbox, the outbox, email ids, tokens.

Repositories never commit on their own account: each method is one statement (or one short
transaction it names), so a caller's crash between two of them leaves a state the next
claim continues from (docs/channels.md, "Crashes").
"""

from __future__ import annotations

from dataclasses import dataclass
from typing import Any

from psycopg import AsyncConnection
from psycopg.types.json import Jsonb
from psycopg_pool import AsyncConnectionPool

_CLAIM_INBOX = """WITH due AS (
        SELECT i.id FROM channel_inbox i
        WHERE i.done_at IS NULL AND i.next_attempt_at <= now()
          AND i.channel = ANY(%(channels)s)
          AND NOT EXISTS (SELECT 1 FROM channel_inbox e
                          WHERE e.channel = i.channel AND e.conversation_key = i.conversation_key
                            AND e.id < i.id AND e.done_at IS NULL)
        ORDER BY i.id LIMIT %(batch)s FOR UPDATE SKIP LOCKED)
    UPDATE channel_inbox i SET attempts = i.attempts + 1,
        next_attempt_at = now() + %(ttl_s)s * interval '1 second'
    FROM due WHERE i.id = due.id
    RETURNING i.id, i.channel, i.delivery_key, i.conversation_key, i.kind, i.body, i.attempts"""
# A send begun is marked (`sending_since`) in the claim itself: a process that dies before
# recording the outcome leaves a row nobody sends again (at most once).
_CLAIM_OUTBOX = """WITH due AS (
        SELECT o.id FROM channel_outbox o
        WHERE o.delivered_at IS NULL AND o.failed_at IS NULL AND o.sending_since IS NULL
          AND o.next_attempt_at <= now() AND o.channel = ANY(%(channels)s)
          AND NOT EXISTS (SELECT 1 FROM channel_outbox e
                          WHERE e.channel = o.channel AND e.conversation_key = o.conversation_key
                            AND e.id < o.id AND e.delivered_at IS NULL AND e.failed_at IS NULL)
        ORDER BY o.id LIMIT %(batch)s FOR UPDATE SKIP LOCKED)
    UPDATE channel_outbox o SET attempts = o.attempts + 1, sending_since = now()
    FROM due WHERE o.id = due.id
    RETURNING o.id, o.channel, o.answer_key, o.kind, o.body, o.attempts, o.thread_id"""
_UNKNOWN = """UPDATE channel_outbox SET failed_at = now(), sending_since = NULL,
        last_error = 'the process sending it stopped: outcome unknown, not sent again'
    WHERE delivered_at IS NULL AND failed_at IS NULL
      AND sending_since < now() - %s * interval '1 second'
    RETURNING id, answer_key"""


@dataclass(frozen=True)
class Conversation:
    channel: str
    conversation_key: str
    thread_id: str
    user_id: str
    role: str
    session_id: str
    link: str | None
    address: dict[str, Any]


@dataclass(frozen=True)
class Inbound:
    id: int
    channel: str
    delivery_key: str
    conversation_key: str
    kind: str  # message | decision | release
    body: dict[str, Any]
    attempts: int


@dataclass(frozen=True)
class Outbound:
    id: int
    channel: str
    answer_key: str
    kind: str
    body: dict[str, Any]
    attempts: int
    thread_id: str


def _conversation(row: dict[str, Any]) -> Conversation:
    return Conversation(
        channel=row["channel"],
        conversation_key=row["conversation_key"],
        thread_id=row["thread_id"],
        user_id=row["user_id"],
        role=row["role"],
        session_id=row["session_id"],
        link=row["link"],
        address=dict(row["address"] or {}),
    )


class ChannelStore:
    def __init__(self, pool: AsyncConnectionPool[Any]) -> None:
        self.pool = pool

    # -- conversations -----------------------------------------------------------------------

    async def conversation(self, channel: str, key: str) -> Conversation | None:
        async with self.pool.connection() as conn:
            cur = await conn.execute(
                "SELECT * FROM channel_conversations WHERE channel = %s AND conversation_key = %s",
                (channel, key),
            )
            row = await cur.fetchone()
        return None if row is None else _conversation(row)

    async def conversation_of_thread(self, thread_id: str) -> Conversation | None:
        async with self.pool.connection() as conn:
            cur = await conn.execute(
                "SELECT * FROM channel_conversations WHERE thread_id = %s", (thread_id,)
            )
            row = await cur.fetchone()
        return None if row is None else _conversation(row)

    async def bind(self, proposed: Conversation) -> Conversation:
        """The conversation's binding: the one stored, or `proposed` stored now. The first
        message decides whose thread it is; a later one never moves it."""
        async with self.pool.connection() as conn:
            await conn.execute(
                """INSERT INTO channel_conversations (channel, conversation_key, thread_id,
                       user_id, role, session_id, link, address)
                   VALUES (%s, %s, %s, %s, %s, %s, %s, %s) ON CONFLICT DO NOTHING""",
                (
                    proposed.channel,
                    proposed.conversation_key,
                    proposed.thread_id,
                    proposed.user_id,
                    proposed.role,
                    proposed.session_id,
                    proposed.link,
                    Jsonb(proposed.address),
                ),
            )
        found = await self.conversation(proposed.channel, proposed.conversation_key)
        assert found is not None
        return found

    async def tag_thread(self, conversation: Conversation) -> None:
        """The thread's metadata names its channel (and the conversation's link), for
        /state, the console and analytics. The thread exists once its first run opened."""
        tag: dict[str, Any] = {"channel": conversation.channel}
        if conversation.link:
            tag["channel_link"] = conversation.link
        async with self.pool.connection() as conn:
            await conn.execute(
                "UPDATE threads SET metadata = metadata || %s WHERE thread_id = %s "
                "AND NOT metadata @> %s",
                (Jsonb(tag), conversation.thread_id, Jsonb(tag)),
            )

    async def customer_exists(self, customer_id: str) -> bool:
        async with self.pool.connection() as conn:
            cur = await conn.execute("SELECT 1 FROM customers WHERE id = %s", (customer_id,))
            return await cur.fetchone() is not None

    async def customer_by_email(self, address: str) -> str | None:
        async with self.pool.connection() as conn:
            cur = await conn.execute(
                "SELECT id FROM customers WHERE lower(email) = lower(%s) ORDER BY id LIMIT 1",
                (address,),
            )
            row = await cur.fetchone()
        return None if row is None else str(row["id"])

    # -- the inbox ---------------------------------------------------------------------------

    @staticmethod
    async def receive(
        conn: AsyncConnection[Any],
        channel: str,
        delivery_key: str,
        conversation_key: str,
        kind: str,
        body: dict[str, Any],
        *,
        done_outcome: str | None = None,
    ) -> bool:
        """Store a delivered message (in the caller's transaction); False: seen before.
        `done_outcome`: stored as already handled (an auto-reply: kept, never answered)."""
        cur = await conn.execute(
            """INSERT INTO channel_inbox (channel, delivery_key, conversation_key, kind, body,
                   done_at, outcome)
               VALUES (%s, %s, %s, %s, %s, CASE WHEN %s::text IS NULL THEN NULL ELSE now() END,
                       %s)
               ON CONFLICT (channel, delivery_key) DO NOTHING RETURNING id""",
            (
                channel,
                delivery_key,
                conversation_key,
                kind,
                Jsonb(body),
                done_outcome,
                done_outcome,
            ),
        )
        return await cur.fetchone() is not None

    async def claim_inbox(self, channels: list[str], batch: int, ttl_s: float) -> list[Inbound]:
        """Due messages of these channels (the ones this replica serves)."""
        async with self.pool.connection() as conn:
            params = {"channels": channels, "batch": batch, "ttl_s": ttl_s}
            cur = await conn.execute(_CLAIM_INBOX, params)
            rows = await cur.fetchall()
        return [
            Inbound(
                id=int(r["id"]),
                channel=r["channel"],
                delivery_key=r["delivery_key"],
                conversation_key=r["conversation_key"],
                kind=r["kind"],
                body=dict(r["body"]),
                attempts=int(r["attempts"]),
            )
            for r in rows
        ]

    async def extend_inbox(self, ids: list[int], ttl_s: float) -> None:
        if not ids:
            return
        async with self.pool.connection() as conn:
            await conn.execute(
                "UPDATE channel_inbox SET next_attempt_at = now() + %s * interval '1 second' "
                "WHERE id = ANY(%s) AND done_at IS NULL",
                (ttl_s, ids),
            )

    async def note_run(self, inbound_id: int, run_id: str) -> None:
        """The run a message started (a decision's resume): handled again after a crash, the
        message reads that run's recorded result instead of deciding twice."""
        async with self.pool.connection() as conn:
            await conn.execute(
                "UPDATE channel_inbox SET body = body || jsonb_build_object('run_id', %s::text) "
                "WHERE id = %s",
                (run_id, inbound_id),
            )

    async def run_result(self, thread_id: str, run_id: str) -> tuple[str, dict[str, Any]] | None:
        async with self.pool.connection() as conn:
            cur = await conn.execute(
                "SELECT status, result FROM runs WHERE thread_id = %s AND run_id = %s",
                (thread_id, run_id),
            )
            row = await cur.fetchone()
        if row is None:
            return None
        return str(row["status"]), dict(row["result"] or {})

    async def finish_inbox(self, inbound_id: int, outcome: str) -> None:
        async with self.pool.connection() as conn:
            await conn.execute(
                "UPDATE channel_inbox SET done_at = now(), outcome = %s WHERE id = %s",
                (outcome, inbound_id),
            )

    async def retry_inbox(
        self, inbound_id: int, delay_s: float, outcome: str, *, counted: bool = True
    ) -> None:
        """Due again after `delay_s`; not `counted`: this claim is not an attempt."""
        async with self.pool.connection() as conn:
            await conn.execute(
                "UPDATE channel_inbox SET next_attempt_at = now() + %s * interval '1 second', "
                "outcome = %s, attempts = attempts - CASE WHEN %s THEN 0 ELSE 1 END "
                "WHERE id = %s",
                (delay_s, outcome, counted, inbound_id),
            )

    # -- the outbox --------------------------------------------------------------------------

    @staticmethod
    async def enqueue(
        conn: AsyncConnection[Any],
        conversation: Conversation,
        answer_key: str,
        kind: str,
        body: dict[str, Any],
    ) -> bool:
        """One thing to send, once: False when `answer_key` was enqueued before."""
        cur = await conn.execute(
            """INSERT INTO channel_outbox (channel, answer_key, conversation_key, thread_id,
                   kind, body)
               VALUES (%s, %s, %s, %s, %s, %s) ON CONFLICT (answer_key) DO NOTHING RETURNING id""",
            (
                conversation.channel,
                answer_key,
                conversation.conversation_key,
                conversation.thread_id,
                kind,
                Jsonb(body),
            ),
        )
        return await cur.fetchone() is not None

    async def unsent(self, thread_id: str, kind: str) -> bool:
        """Whether something of this kind waits to be sent on the thread."""
        async with self.pool.connection() as conn:
            cur = await conn.execute(
                "SELECT 1 FROM channel_outbox WHERE thread_id = %s AND kind = %s "
                "AND delivered_at IS NULL AND failed_at IS NULL LIMIT 1",
                (thread_id, kind),
            )
            return await cur.fetchone() is not None

    async def answers_within(self, thread_id: str, kind: str, seconds: float) -> int:
        async with self.pool.connection() as conn:
            cur = await conn.execute(
                "SELECT count(*) AS n FROM channel_outbox WHERE thread_id = %s AND kind = %s "
                "AND created_at > now() - %s * interval '1 second'",
                (thread_id, kind, seconds),
            )
            row = await cur.fetchone()
        return int(row["n"]) if row else 0

    async def claim_outbox(self, channels: list[str], batch: int) -> list[Outbound]:
        async with self.pool.connection() as conn:
            cur = await conn.execute(_CLAIM_OUTBOX, {"channels": channels, "batch": batch})
            rows = await cur.fetchall()
        return [
            Outbound(
                id=int(r["id"]),
                channel=r["channel"],
                answer_key=r["answer_key"],
                kind=r["kind"],
                body=dict(r["body"]),
                attempts=int(r["attempts"]),
                thread_id=r["thread_id"],
            )
            for r in rows
        ]

    async def delivered(self, outbound_id: int) -> None:
        async with self.pool.connection() as conn:
            await conn.execute(
                "UPDATE channel_outbox SET delivered_at = now(), sending_since = NULL, "
                "last_error = NULL WHERE id = %s",
                (outbound_id,),
            )

    async def failed(self, outbound_id: int, error: str, delay_s: float | None) -> None:
        """Not sent: tried again after `delay_s`, or (None) given up."""
        async with self.pool.connection() as conn:
            await conn.execute(
                """UPDATE channel_outbox SET sending_since = NULL, last_error = %s,
                       next_attempt_at = now() + coalesce(%s, 0) * interval '1 second',
                       failed_at = CASE WHEN %s::float8 IS NULL THEN now() END
                   WHERE id = %s""",
                (error, delay_s, delay_s, outbound_id),
            )

    async def prune(self, keep_s: float) -> None:
        """Handled messages and sent answers are kept a while (a redelivery is recognised
        meanwhile), then deleted: they hold what customers wrote. Bounded batches."""
        async with self.pool.connection() as conn:
            await conn.execute(
                """DELETE FROM channel_inbox WHERE id IN (SELECT id FROM channel_inbox
                       WHERE done_at < now() - %s * interval '1 second' LIMIT 1000)""",
                (keep_s,),
            )
            await conn.execute(
                """DELETE FROM channel_outbox WHERE id IN (SELECT id FROM channel_outbox
                       WHERE coalesce(delivered_at, failed_at) < now() - %s * interval '1 second'
                       LIMIT 1000)""",
                (keep_s,),
            )

    async def abandon_unknown(self, after_s: float) -> list[dict[str, Any]]:
        async with self.pool.connection() as conn:
            cur = await conn.execute(_UNKNOWN, (after_s,))
            return list(await cur.fetchall())

    # -- email threading and confirmation tokens ---------------------------------------------

    @staticmethod
    async def email_conversation(conn: AsyncConnection[Any], message_ids: list[str]) -> str | None:
        """The conversation one of these Message-IDs belongs to (the newest reference
        first: the caller lists In-Reply-To, then References from the end)."""
        if not message_ids:
            return None
        cur = await conn.execute(
            "SELECT message_id, conversation_key FROM email_message_ids WHERE message_id = ANY(%s)",
            (message_ids,),
        )
        found = {r["message_id"]: r["conversation_key"] for r in await cur.fetchall()}
        for message_id in message_ids:
            if message_id in found:
                return str(found[message_id])
        return None

    @staticmethod
    async def remember_email(
        conn: AsyncConnection[Any], message_id: str, conversation_key: str
    ) -> None:
        await conn.execute(
            "INSERT INTO email_message_ids (message_id, conversation_key) VALUES (%s, %s) "
            "ON CONFLICT DO NOTHING",
            (message_id, conversation_key),
        )

    async def email_ids(self, conversation_key: str, limit: int = 20) -> list[str]:
        """The conversation's Message-IDs, received and sent, oldest first (the newest
        `limit`): the References of a message into it."""
        async with self.pool.connection() as conn:
            cur = await conn.execute(
                """SELECT message_id FROM (SELECT message_id, created_at FROM email_message_ids
                       WHERE conversation_key = %s ORDER BY created_at DESC, message_id
                       LIMIT %s) newest ORDER BY created_at, message_id""",
                (conversation_key, limit),
            )
            return [str(r["message_id"]) for r in await cur.fetchall()]

    @staticmethod
    async def add_token(conn: AsyncConnection[Any], token_hash: str, thread_id: str) -> None:
        await conn.execute(
            "INSERT INTO channel_confirmations (token_hash, thread_id) VALUES (%s, %s)",
            (token_hash, thread_id),
        )

    async def spend_token(
        self, token_hash: str, thread_id: str, max_age_s: float, inbound_id: int
    ) -> bool:
        """True for a live token of this thread spent by this message (again, when the
        message is handled again); no other message can use it."""
        async with self.pool.connection() as conn:
            cur = await conn.execute(
                """UPDATE channel_confirmations
                   SET used_at = coalesce(used_at, now()), used_by = %(by)s
                   WHERE token_hash = %(hash)s AND thread_id = %(thread)s
                     AND (used_at IS NULL OR used_by = %(by)s)
                     AND created_at > now() - %(age)s * interval '1 second' RETURNING 1""",
                {"hash": token_hash, "thread": thread_id, "age": max_age_s, "by": inbound_id},
            )
            return await cur.fetchone() is not None
