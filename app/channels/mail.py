"""Email: a thread per conversation, answers by SMTP in the same thread, writes confirmed by
a reply to our confirmation email.

The sender's address is the customer with that email: reading needs no proof, because the
answer goes only to that mailbox. A write waits (as on the page) and is confirmed only by a
reply that carries the one-time token of our confirmation email, which a forged sender
never receives; a "yes" without it is a new message, and the write it would have confirmed
is closed as not executed.
"""

from __future__ import annotations

import asyncio
import hashlib
import secrets
import smtplib
import ssl
import uuid
from email.message import EmailMessage
from email.utils import formatdate
from typing import Any

import structlog
from psycopg_pool import AsyncConnectionPool

from app.channels.mail_parse import InboundEmail
from app.channels.store import ChannelStore, Conversation, Inbound, Outbound
from app.channels.turns import ChannelTurns, TurnOutcome, decision_in
from app.channels.workers import Delivery
from app.config import Settings
from app.identity import GUEST_PREFIX

log = structlog.get_logger(__name__)

CHANNEL = "email"
TOKEN_TTL_S = 7 * 24 * 3600.0
HOUR_S = 3600.0
SEND_TIMEOUT_S = 10.0


def token_hash(token: str) -> str:
    return hashlib.sha256(token.encode()).hexdigest()


def _digest(text: str, length: int) -> str:
    return hashlib.sha256(text.encode()).hexdigest()[:length]


async def store_inbound(
    pool: AsyncConnectionPool[Any], store: ChannelStore, mail: InboundEmail
) -> bool:
    """Store the message with its conversation found by In-Reply-To / References (only a
    conversation of the same sender: a reply from elsewhere starts its own), in one
    transaction. False: this Message-ID was stored before."""
    async with pool.connection() as conn, conn.transaction():
        key = await store.email_conversation(conn, mail.thread_refs)
        if key is not None:
            cur = await conn.execute(
                "SELECT address->>'to' AS owner FROM channel_conversations "
                "WHERE channel = %s AND conversation_key = %s",
                (CHANNEL, key),
            )
            row = await cur.fetchone()
            if row is not None and row["owner"] != mail.sender:
                key = None
        key = key or mail.message_id
        await store.remember_email(conn, mail.message_id, key)
        return await store.receive(
            conn,
            CHANNEL,
            mail.message_id,
            key,
            "message",
            mail.as_body(),
            done_outcome=f"not_answered:{mail.auto}" if mail.auto else None,
        )


def reply_subject(subject: str) -> str:
    return subject if subject.lower().startswith("re:") else f"Re: {subject}".strip()


class EmailAdapter:
    channel = CHANNEL

    def __init__(
        self,
        store: ChannelStore,
        pool: AsyncConnectionPool[Any],
        turns: ChannelTurns,
        settings: Settings,
    ) -> None:
        self.store = store
        self.pool = pool
        self.turns = turns
        self.per_hour = settings.email_answers_per_hour
        self.own = (settings.email_from or "").strip()
        self.domain = self.own.rpartition("@")[2] or "cs-agent.invalid"

    async def _bind(self, item: Inbound) -> Conversation:
        found = await self.store.conversation(CHANNEL, item.conversation_key)
        if found is not None:
            return found
        sender = str(item.body["sender"])
        customer = await self.store.customer_by_email(sender)
        if customer is not None:
            user_id, role = customer, "customer"
        else:
            user_id, role = f"{GUEST_PREFIX}email-{_digest(sender, 20)}", "guest"
        session_id = f"em-{_digest(item.conversation_key, 24)}"
        proposed = Conversation(
            channel=CHANNEL,
            conversation_key=item.conversation_key,
            thread_id=f"{user_id}:{session_id}",
            user_id=user_id,
            role=role,
            session_id=session_id,
            link=None,
            address={"to": sender, "subject": str(item.body.get("subject") or "")},
        )
        return await self.store.bind(proposed)

    async def handle(self, item: Inbound) -> str:
        conv = await self._bind(item)
        body = item.body
        text = str(body.get("text") or "").strip()
        if body.get("attachments"):
            names = ", ".join(str(n) for n in body["attachments"])
            text += f"\n\n[attachments sent, not read: {names}]"
        if not text:
            return "empty"
        turn_key = f"em-{_digest(str(body['message_id']), 32)}"
        outcome: TurnOutcome | None = None
        token = body.get("token")
        control = await self.turns.control(conv)
        if (
            token
            and control["state"] == "agent"
            and ("run_id" in body or await self.turns.pending(conv))  # noted: handled again
        ):
            decision = decision_in(text)
            spent = decision is not None and await self.store.spend_token(
                token_hash(str(token)), conv.thread_id, TOKEN_TTL_S, item.id
            )
            if decision is not None and spent:
                outcome = await self.turns.decide(conv, decision, item)
        if outcome is None:
            outcome = await self.turns.message(conv, text, turn_key)
        await self.store.tag_thread(conv)
        return await self._answer(conv, item, outcome, turn_key)

    async def _answer(
        self, conv: Conversation, item: Inbound, outcome: TurnOutcome, turn_key: str
    ) -> str:
        if not outcome.answer and not outcome.pending:
            return outcome.status
        if await self.store.answers_within(conv.thread_id, "email", HOUR_S) >= self.per_hour:
            log.warning("email answers per hour reached; not answered", thread_id=conv.thread_id)
            return "answer_limit"
        subject = reply_subject(str(item.body.get("subject") or conv.address.get("subject") or ""))
        text, token = outcome.answer, None
        if outcome.pending:
            token = secrets.token_urlsafe(18)
            asks = "; ".join(str(p.get("summary") or p.get("name")) for p in outcome.pending)
            text = (
                f"{text}\n\nPlease confirm: {asks}.\nReply YES to this email to confirm, or NO "
                f"to cancel. Keep the reference [confirm {token}] in the subject."
            ).strip()
            subject = f"{subject} [confirm {token}]"
        incoming = str(item.body["message_id"])
        references = [*item.body.get("references", []), incoming][-20:]
        message_id = f"<{uuid.uuid4().hex}@{self.domain}>"
        mail = {
            "to": conv.address["to"],
            "subject": subject,
            "message_id": message_id,
            "in_reply_to": incoming,
            "references": references,
            "text": text,
        }
        async with self.pool.connection() as conn, conn.transaction():
            if await self.store.enqueue(conn, conv, f"{turn_key}:email", "email", mail):
                await self.store.remember_email(conn, message_id, conv.conversation_key)
                if token is not None:
                    await self.store.add_token(conn, token_hash(token), conv.thread_id)
        return outcome.status


class SmtpCourier:
    """The answers, by SMTP through the SMTP_* settings, from EMAIL_FROM."""

    channel = CHANNEL

    def __init__(self, settings: Settings) -> None:
        if not settings.smtp_host or not settings.email_from:
            raise ValueError("the email channel needs SMTP_HOST and EMAIL_FROM")
        self.host = settings.smtp_host
        self.port = settings.smtp_port
        self.starttls = settings.smtp_starttls
        self.username = settings.smtp_username
        password = settings.smtp_password
        self.password = password.get_secret_value() if password else None
        self.sender = settings.email_from

    async def send(self, item: Outbound) -> Delivery:
        return await asyncio.to_thread(self._send, self.compose(item.body))

    def compose(self, body: dict[str, Any]) -> EmailMessage:
        mail = EmailMessage()
        mail["From"] = self.sender
        mail["To"] = body["to"]
        mail["Subject"] = body["subject"]
        mail["Message-ID"] = body["message_id"]
        mail["In-Reply-To"] = body["in_reply_to"]
        mail["References"] = " ".join(body["references"])
        mail["Date"] = formatdate(localtime=False, usegmt=True)
        mail["Auto-Submitted"] = "auto-replied"  # RFC 3834: other robots do not answer it
        mail.set_content(body["text"])
        return mail

    def _send(self, mail: EmailMessage) -> Delivery:
        try:
            with smtplib.SMTP(self.host, self.port, timeout=SEND_TIMEOUT_S) as smtp:
                if self.starttls:
                    smtp.starttls(context=ssl.create_default_context())
                if self.username:
                    smtp.login(self.username, self.password or "")
                smtp.send_message(mail)
        except smtplib.SMTPResponseException as error:  # refused: 4xx again, 5xx never
            return Delivery(f"SMTP {error.smtp_code}", retry=error.smtp_code < 500)
        except smtplib.SMTPRecipientsRefused:
            return Delivery("recipient refused", retry=False)
        except (OSError, smtplib.SMTPException) as error:
            return Delivery(type(error).__name__, retry=True)
        return Delivery()
