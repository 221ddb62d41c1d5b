"""Chatwoot's agent bot: its webhook's events in, the bot's messages and status changes out.

The contract, from Chatwoot's source (cited in docs/channels.md): the agent bot is POSTed
`message_created`, `message_updated`, `conversation_opened`, `conversation_resolved` and
`webwidget_triggered` (app/listeners/agent_bot_listener.rb), as JSON with a 5 s timeout and
no retry (lib/webhooks/trigger.rb: on an error the conversation is opened for people).
Messages are posted with `POST /api/v1/accounts/{account}/conversations/{id}/messages` and
the status set with `POST .../toggle_status` (swagger/paths/application/conversation/),
both with the bot's `api_access_token`.
"""

from __future__ import annotations

import hashlib
import hmac
import time
from dataclasses import dataclass
from typing import Any

import httpx
import structlog
from psycopg_pool import AsyncConnectionPool

from app.channels.store import ChannelStore, Conversation, Inbound, Outbound
from app.channels.turns import CHANNEL_STAFF, ChannelTurns, TurnOutcome, decision_in
from app.channels.workers import Delivery
from app.identity import GUEST_PREFIX

log = structlog.get_logger(__name__)

CHANNEL = "chatwoot"
MAX_SKEW_S = 300  # a signed timestamp older (or newer) than this is refused
CONFIRM_ITEMS = [
    {"title": "Approve", "value": "approve"},
    {"title": "Decline", "value": "reject"},
]
_DECISIONS = {"approve": "approve", "yes": "approve", "reject": "reject", "decline": "reject"}


def signature_ok(secret: str, timestamp: str | None, signature: str | None, raw: bytes) -> bool:
    """`sha256=` + hex HMAC-SHA256 of "{timestamp}.{raw body}", the timestamp recent."""
    if not timestamp or not signature or not signature.startswith("sha256="):
        return False
    try:
        sent_at = int(timestamp)
    except ValueError:
        return False
    if abs(time.time() - sent_at) > MAX_SKEW_S:
        return False
    expected = hmac.new(secret.encode(), f"{timestamp}.".encode() + raw, hashlib.sha256)
    return hmac.compare_digest("sha256=" + expected.hexdigest(), signature.strip())


@dataclass(frozen=True)
class Event:
    """What a webhook asks of us, ready to store."""

    kind: str  # message | decision | release
    conversation_key: str
    delivery_key: str
    body: dict[str, Any]


def _int(value: Any) -> int | None:
    try:
        return int(value)
    except (TypeError, ValueError):
        return None


def _account(payload: dict[str, Any]) -> int | None:
    account = payload.get("account")
    if isinstance(account, dict) and _int(account.get("id")) is not None:
        return _int(account.get("id"))
    if _int(payload.get("account_id")) is not None:
        return _int(payload.get("account_id"))
    messages = payload.get("messages")
    for message in messages if isinstance(messages, list) else []:
        if isinstance(message, dict) and _int(message.get("account_id")) is not None:
            return _int(message.get("account_id"))
    return None


def _dict(value: Any) -> dict[str, Any]:
    return value if isinstance(value, dict) else {}


def _contact(payload: dict[str, Any], conversation: dict[str, Any]) -> dict[str, Any]:
    """The contact and whether Chatwoot verified its identifier (identity validation)."""
    sender = _dict(payload.get("sender"))
    meta = _dict(conversation.get("meta"))
    meta_sender = _dict(meta.get("sender"))
    contact_inbox = _dict(conversation.get("contact_inbox"))
    verified = contact_inbox.get("hmac_verified") is True or meta.get("hmac_verified") is True
    identifier = sender.get("identifier") or meta_sender.get("identifier")
    return {
        "id": _int(sender.get("id")) or _int(meta_sender.get("id")),
        "identifier": str(identifier) if identifier else None,
        "verified": verified,
    }


def _text(payload: dict[str, Any]) -> str:
    text = str(payload.get("content") or "").strip()
    attachments = payload.get("attachments")
    if isinstance(attachments, list) and attachments:  # noted, not read
        text += f"\n\n[{len(attachments)} attachment(s) sent; attachments are not read]"
    return text.strip()


def classify(payload: dict[str, Any], delivery: str | None) -> Event | None:
    """The event to store, or None for everything the bot ignores: outgoing messages (our
    own replies come back as events), private notes, activity, other events."""
    event = payload.get("event")
    if event in ("message_created", "message_updated"):
        conversation = _dict(payload.get("conversation"))
        account, conv_id = _account(payload), _int(conversation.get("id"))
        message_id = _int(payload.get("id"))
        if account is None or conv_id is None or message_id is None:
            return None
        key = f"{account}/{conv_id}"
        base = {"account": account, "conversation": conv_id, "message_id": message_id}
        if event == "message_updated":
            return _selection(payload, key, base)
        if payload.get("message_type") != "incoming" or payload.get("private"):
            return None
        text = _text(payload)
        if not text:
            return None
        body = {
            **base,
            "text": text,
            "contact": _contact(payload, conversation),
            "status": conversation.get("status")
            if isinstance(conversation.get("status"), str)
            else None,
        }
        return Event("message", key, delivery or f"message:{message_id}", body)
    if event in ("conversation_status_changed", "conversation_opened", "conversation_updated"):
        if payload.get("status") != "pending":  # pending: the bot's again
            return None
        account, conv_id = _account(payload), _int(payload.get("id"))
        if account is None or conv_id is None:
            return None
        stamp = payload.get("updated_at") or payload.get("timestamp") or time.time()
        body = {"account": account, "conversation": conv_id}
        key = delivery or f"pending:{account}/{conv_id}:{stamp}"
        return Event("release", f"{account}/{conv_id}", key, body)
    return None


def _selection(payload: dict[str, Any], key: str, base: dict[str, Any]) -> Event | None:
    """The customer's choice on our input_select (Chatwoot stores it on the message as
    `content_attributes.submitted_values` and sends `message_updated`)."""
    if payload.get("content_type") != "input_select":
        return None
    attributes = payload.get("content_attributes") or {}
    submitted = attributes.get("submitted_values") if isinstance(attributes, dict) else None
    if not isinstance(submitted, list) or not submitted or not isinstance(submitted[0], dict):
        return None
    choice = str(submitted[0].get("value") or submitted[0].get("title") or "").strip().lower()
    decision = _DECISIONS.get(choice)
    if decision is None:
        return None
    body = {**base, "decision": decision}
    # Keyed by the message, not the delivery: every later update of that message carries
    # the same submitted values, and must not approve a newer write.
    return Event("decision", key, f"select:{base['message_id']}", body)


class ChatwootAdapter:
    channel = CHANNEL

    def __init__(
        self,
        store: ChannelStore,
        pool: AsyncConnectionPool[Any],
        turns: ChannelTurns,
        base_url: str,
    ) -> None:
        self.store = store
        self.pool = pool
        self.turns = turns
        self.base_url = base_url.rstrip("/")

    async def _bind(self, item: Inbound) -> Conversation:
        found = await self.store.conversation(CHANNEL, item.conversation_key)
        if found is not None:
            return found
        account, conv_id = item.body["account"], item.body["conversation"]
        contact = item.body.get("contact") or {}
        identifier = contact.get("identifier")
        if contact.get("verified") and identifier and await self.store.customer_exists(identifier):
            user_id, role = identifier, "customer"
        else:  # a guest: proves who they are with the one-time code, as on the page
            user_id, role = f"{GUEST_PREFIX}cw-{account}-{contact.get('id') or conv_id}", "guest"
        session_id = f"cw-{account}-{conv_id}"
        link = f"{self.base_url}/app/accounts/{account}/conversations/{conv_id}"
        proposed = Conversation(
            channel=CHANNEL,
            conversation_key=item.conversation_key,
            thread_id=f"{user_id}:{session_id}",
            user_id=user_id,
            role=role,
            session_id=session_id,
            link=link,
            address={"account": account, "conversation": conv_id},
        )
        return await self.store.bind(proposed)

    async def handle(self, item: Inbound) -> str:
        if item.kind == "release":
            conv = await self.store.conversation(CHANNEL, item.conversation_key)
            if conv is None:
                return "unknown_conversation"
            return "released" if await self.turns.release_from_channel(conv) else "not_held"
        conv = await self._bind(item)
        control = await self.turns.control(conv)
        turn_key = f"cw-{item.kind}-{item.body['message_id']}"
        outcome: TurnOutcome | None = None
        if item.kind == "decision":
            if control["state"] != "agent":
                return "held"
            outcome = await self.turns.decide(conv, item.body["decision"], item)
            if outcome is None:
                return "nothing_pending"
        else:
            status = item.body.get("status")
            if status == "pending" and await self._handed_back(conv, control):
                control = await self.turns.control(conv)
            if status == "open" and control["state"] == "agent":
                # Chatwoot's people answer an `open` conversation (they opened it, not our
                # handoff): the bot keeps quiet (Chatwoot issue #11429) and holds the thread
                # for them until it is `pending` again.
                await self.turns.hold_for_channel(conv, from_agent=True)
                control = await self.turns.control(conv)
            text = str(item.body["text"])
            decision = decision_in(text) if control["state"] == "agent" else None
            noted = "run_id" in item.body  # its resume ran before: read that run
            if decision is not None and (noted or await self.turns.pending(conv)):
                outcome = await self.turns.decide(conv, decision, item)
            if outcome is None:
                outcome = await self.turns.message(conv, text, turn_key)
        await self.store.tag_thread(conv)
        await self._answer(conv, outcome, turn_key)
        return outcome.status

    async def _handed_back(self, conv: Conversation, control: dict[str, Any]) -> bool:
        """A message of a `pending` conversation on a thread Chatwoot's people hold: they
        handed it back to the bot (Chatwoot tells an agent bot of no such status change:
        agent_bot_listener.rb sends conversation_opened and _resolved only). Not while our
        own `open` is still to be sent: that `pending` is from before our handoff."""
        if control["state"] != "human" or control["assignee"] != CHANNEL_STAFF:
            return False
        if await self.store.unsent(conv.thread_id, "status"):
            return False
        return await self.turns.release_from_channel(conv)

    async def _answer(self, conv: Conversation, outcome: TurnOutcome, turn_key: str) -> None:
        """What the turn sends back, each once (its key): the answer, the confirmation, and
        at a handoff the summary as a private note and the conversation opened for people."""
        address = conv.address
        async with self.pool.connection() as conn, conn.transaction():
            if outcome.answer:
                body = {**address, "content": outcome.answer}
                await self.store.enqueue(conn, conv, f"{turn_key}:answer", "message", body)
            if outcome.pending:
                body = {**address, **confirmation(outcome.pending)}
                await self.store.enqueue(conn, conv, f"{turn_key}:confirm", "message", body)
        if outcome.status == "handed_off":  # stored for the person who holds it
            return
        await self.turns.hold_for_channel(conv)
        control = await self.turns.control(conv)
        if control["state"] == "human" and control["assignee"] == CHANNEL_STAFF:
            summary = control.get("summary") or "The customer asked for a person."
            note = {**address, "content": f"Handed off by the bot: {summary}", "private": True}
            async with self.pool.connection() as conn, conn.transaction():
                await self.store.enqueue(conn, conv, f"{turn_key}:note", "note", note)
                status = {**address, "status": "open"}
                await self.store.enqueue(conn, conv, f"{turn_key}:open", "status", status)


def confirmation(pending: list[dict[str, Any]]) -> dict[str, Any]:
    """The interactive question (input_select), with the text for channels without buttons."""
    asks = "; ".join(str(p.get("summary") or p.get("name") or "a change") for p in pending)
    return {
        "content": f"Please confirm: {asks}. Reply YES to confirm or NO to cancel.",
        "content_type": "input_select",
        "content_attributes": {"items": CONFIRM_ITEMS},
    }


class ChatwootCourier:
    """Posts the bot's messages and status changes with its access token."""

    channel = CHANNEL

    def __init__(self, base_url: str, token: str, client: httpx.AsyncClient | None = None):
        self.base_url = base_url.rstrip("/")
        self.headers = {"api_access_token": token}
        self.client = client or httpx.AsyncClient(timeout=10.0, follow_redirects=False)

    async def send(self, item: Outbound) -> Delivery:
        body = item.body
        path = f"/api/v1/accounts/{body['account']}/conversations/{body['conversation']}"
        if item.kind == "status":
            url, payload = f"{path}/toggle_status", {"status": body["status"]}
        else:
            url = f"{path}/messages"
            payload = {
                "content": body["content"],
                "message_type": "outgoing",
                "private": bool(body.get("private")),
            }
            if body.get("content_type"):
                payload["content_type"] = body["content_type"]
                payload["content_attributes"] = body.get("content_attributes") or {}
        try:
            response = await self.client.post(
                self.base_url + url, json=payload, headers=self.headers
            )
        except (httpx.ConnectError, httpx.ConnectTimeout) as error:  # nothing reached it
            return Delivery(type(error).__name__, retry=True)
        except httpx.HTTPError as error:  # it may have been created: not sent again
            return Delivery(f"{type(error).__name__}: outcome unknown", retry=False)
        if response.is_success:
            return Delivery()
        retry = response.status_code == 429 or response.status_code >= 500
        return Delivery(f"HTTP {response.status_code}", retry=retry)

    async def aclose(self) -> None:
        await self.client.aclose()
