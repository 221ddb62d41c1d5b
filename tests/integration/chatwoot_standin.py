"""A Chatwoot stand-in built from its contract (docs/channels.md): the bot's API (messages,
toggle_status, checked for the bot's `api_access_token`), recorded; and the agent bot's
webhooks, signed as Chatwoot signs them. Like Chatwoot, every message the bot posts comes
back to the bot as a `message_created` event (outgoing): the service must ignore it."""

from __future__ import annotations

import hashlib
import hmac
import json
import re
import threading
import time
import uuid
from dataclasses import dataclass, field
from http.server import BaseHTTPRequestHandler, ThreadingHTTPServer
from typing import Any

import httpx

_PATH = re.compile(r"^/api/v1/accounts/(\d+)/conversations/(\d+)/(messages|toggle_status)$")


def sign(secret: str, timestamp: str, body: bytes) -> str:
    digest = hmac.new(secret.encode(), f"{timestamp}.".encode() + body, hashlib.sha256)
    return "sha256=" + digest.hexdigest()


@dataclass
class Posted:
    account: int
    conversation: int
    kind: str  # messages | toggle_status
    body: dict[str, Any]


@dataclass
class ChatwootStandIn:
    token: str
    secret: str
    webhook_url: str = ""  # the service's webhook, set once it runs
    posted: list[Posted] = field(default_factory=list)
    echoes: list[int] = field(default_factory=list)  # the service's answers to our echoes
    fail_next: int = 0  # answer this many posts with 503 first
    statuses: dict[int, str] = field(default_factory=dict)  # conversation -> its status
    _next_id: int = 1000
    _lock: threading.Lock = field(default_factory=threading.Lock)
    _server: ThreadingHTTPServer | None = None

    # -- the bot's API ------------------------------------------------------------------------

    def start(self) -> ChatwootStandIn:
        standin = self

        class Handler(BaseHTTPRequestHandler):
            def log_message(self, *args: Any) -> None:
                return None

            def do_POST(self) -> None:
                standin._api(self)

        self._server = ThreadingHTTPServer(("127.0.0.1", 0), Handler)
        threading.Thread(target=self._server.serve_forever, daemon=True).start()
        return self

    def stop(self) -> None:
        if self._server is not None:
            self._server.shutdown()
            self._server.server_close()

    @property
    def url(self) -> str:
        assert self._server is not None
        return f"http://127.0.0.1:{self._server.server_address[1]}"

    def _api(self, handler: BaseHTTPRequestHandler) -> None:
        length = int(handler.headers.get("content-length") or 0)
        body = json.loads(handler.rfile.read(length) or b"{}")
        match = _PATH.match(handler.path)
        if handler.headers.get("api_access_token") != self.token or match is None:
            handler.send_response(401 if match else 404)
            handler.end_headers()
            return
        with self._lock:
            if self.fail_next > 0:
                self.fail_next -= 1
                handler.send_response(503)
                handler.end_headers()
                return
            account, conversation = int(match.group(1)), int(match.group(2))
            self.posted.append(Posted(account, conversation, match.group(3), body))
            if match.group(3) == "toggle_status":
                self.statuses[conversation] = str(body.get("status"))
            self._next_id += 1
            message_id = self._next_id
        handler.send_response(200)
        handler.send_header("content-type", "application/json")
        handler.end_headers()
        handler.wfile.write(json.dumps({"id": message_id}).encode())
        if match.group(3) == "messages":  # Chatwoot tells the bot of its own message too
            event = {
                "event": "message_created",
                "id": message_id,
                "content": body.get("content"),
                "message_type": "outgoing",
                "private": bool(body.get("private")),
                "content_type": body.get("content_type", "text"),
                "account": {"id": account},
                "conversation": {"id": conversation, "status": "pending"},
                "sender": {"id": 1, "type": "agent_bot"},
            }
            threading.Thread(target=self._echo, args=(event,), daemon=True).start()

    def _echo(self, event: dict[str, Any]) -> None:
        try:
            self.echoes.append(self.deliver(event).status_code)
        except httpx.HTTPError:
            self.echoes.append(0)

    # -- the agent bot's webhooks -------------------------------------------------------------

    def deliver(
        self,
        event: dict[str, Any],
        *,
        delivery: str | None = None,
        secret: str | None = None,
        timestamp: int | None = None,
    ) -> httpx.Response:
        body = json.dumps(event).encode()
        stamp = str(int(time.time()) if timestamp is None else timestamp)
        headers = {
            "content-type": "application/json",
            "x-chatwoot-timestamp": stamp,
            "x-chatwoot-signature": sign(secret or self.secret, stamp, body),
            "x-chatwoot-delivery": delivery or str(uuid.uuid4()),
        }
        return httpx.post(self.webhook_url, content=body, headers=headers, timeout=10)

    def incoming(
        self,
        conversation: int,
        text: str,
        *,
        message_id: int | None = None,
        identifier: str | None = None,
        verified: bool = False,
        account: int = 1,
        contact_id: int = 55,
        delivery: str | None = None,
        status: str | None = None,
    ) -> httpx.Response:
        """A customer's message; its conversation's status is the one Chatwoot has now
        (pending, the bot's, unless set), as Chatwoot puts it in the event."""
        with self._lock:
            self._next_id += 1
            mid = message_id if message_id is not None else self._next_id
        event = incoming_event(account, conversation, mid, text, identifier, verified, contact_id)
        event["conversation"]["status"] = status or self.statuses.get(conversation, "pending")
        return self.deliver(event, delivery=delivery)

    def choose(self, conversation: int, message_id: int, value: str, account: int = 1) -> Any:
        """The customer picks an item of our input_select: Chatwoot updates the message."""
        event = {
            "event": "message_updated",
            "id": message_id,
            "content": "Please confirm",
            "message_type": "outgoing",
            "content_type": "input_select",
            "content_attributes": {
                "items": [{"title": "Approve", "value": "approve"}],
                "submitted_values": [{"title": value.title(), "value": value}],
            },
            "private": False,
            "account": {"id": account},
            "conversation": {"id": conversation, "status": "pending"},
        }
        return self.deliver(event)

    def set_status(self, conversation: int, status: str) -> None:
        """A person changes the status in Chatwoot (the agent bot is not told)."""
        self.statuses[conversation] = status

    def status_changed(self, conversation: int, status: str, account: int = 1) -> Any:
        self.statuses[conversation] = status
        event = {
            "event": "conversation_status_changed",
            "id": conversation,
            "status": status,
            "account": {"id": account},
            "updated_at": time.time(),
        }
        return self.deliver(event)

    # -- what it saw ----------------------------------------------------------------------------

    def in_conversation(self, conversation: int, kind: str = "messages") -> list[dict[str, Any]]:
        with self._lock:
            return [
                p.body for p in self.posted if p.conversation == conversation and p.kind == kind
            ]


def incoming_event(
    account: int,
    conversation: int,
    message_id: int,
    text: str,
    identifier: str | None,
    verified: bool,
    contact_id: int,
) -> dict[str, Any]:
    return {
        "event": "message_created",
        "id": message_id,
        "content": text,
        "message_type": "incoming",
        "content_type": "text",
        "private": False,
        "account": {"id": account, "name": "Shop"},
        "inbox": {"id": 3, "name": "Website"},
        "sender": {"id": contact_id, "name": "Noah", "identifier": identifier, "type": "contact"},
        "conversation": {
            "id": conversation,
            "status": "pending",
            "contact_inbox": {"contact_id": contact_id, "hmac_verified": verified},
            "meta": {"hmac_verified": verified, "sender": {"id": contact_id}},
        },
    }
