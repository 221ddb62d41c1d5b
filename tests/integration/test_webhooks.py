"""Handoff webhooks over real HTTP: a receiver on its own port verifies every signature (the
Standard Webhooks scheme, computed here independently of the app) while a thread is handed
off, accepted, written to and released through the service; a receiver that is down for a
while gets every event afterwards, each once by id, a retried event under its first id."""

from __future__ import annotations

import asyncio
import base64
import hashlib
import hmac
import itertools
import json
import os
import socket
import time
from collections.abc import AsyncIterator, Iterator
from dataclasses import dataclass, field
from typing import Any

import httpx
import pytest
from aiohttp import web
from psycopg_pool import AsyncConnectionPool
from pydantic import ValidationError

from app.api.auth import issue_token
from app.config import Settings, webhook_signing_key
from app.notify.webhooks import POLL_S, backoff_s
from tests.fakellm import Reply, Script, ScriptedModelServer
from tests.integration.agent_harness import load_small_shop
from tests.integration.api_harness import LiveServer, live_server

NOAH = "noah_brown_6181"
ALICE = "staff-alice"
KEY = os.urandom(32)
WHSEC = "whsec_" + base64.b64encode(KEY).decode()  # the Standard Webhooks form
PLAIN = "a-plain-webhook-secret-of-some-length"  # used as its bytes
BASE_S, CAP_S = 0.25, 1.0  # quick retries for the tests (shipped: 1 s, capped at 30 s)
SEQUENCE = ["handoff.queued", "handoff.accepted", "message.customer", "handoff.released"]


def free_port() -> int:
    with socket.socket() as s:
        s.bind(("127.0.0.1", 0))
        return int(s.getsockname()[1])


@dataclass
class Attempt:
    id: str
    valid: bool  # signature and timestamp check out
    answered: int
    at: float
    body: dict[str, Any]


@dataclass
class Receiver:
    """A helpdesk's endpoint: checks each request as a Standard Webhooks library would."""

    key: bytes
    port: int = field(default_factory=free_port)
    fail_until: float = 0.0  # answers 500 before this (monotonic) time
    attempts: list[Attempt] = field(default_factory=list)
    _runner: web.AppRunner | None = None

    @property
    def url(self) -> str:
        return f"http://127.0.0.1:{self.port}/hooks"

    def verify(self, request: web.Request, body: bytes) -> bool:
        event_id = request.headers["webhook-id"]
        timestamp = request.headers["webhook-timestamp"]
        signed = f"{event_id}.{timestamp}.".encode() + body
        expected = base64.b64encode(hmac.new(self.key, signed, hashlib.sha256).digest())
        given = [
            part.split(",", 1)[1].encode()
            for part in request.headers["webhook-signature"].split()
            if part.startswith("v1,")
        ]
        fresh = abs(time.time() - int(timestamp)) < 300
        return fresh and any(hmac.compare_digest(expected, g) for g in given)

    async def handle(self, request: web.Request) -> web.Response:
        body = await request.read()
        status = 500 if time.monotonic() < self.fail_until else 200
        self.attempts.append(
            Attempt(
                id=request.headers["webhook-id"],
                valid=self.verify(request, body),
                answered=status,
                at=time.monotonic(),
                body=json.loads(body),
            )
        )
        return web.Response(status=status)

    async def start(self) -> None:
        app = web.Application()
        app.router.add_post("/hooks", self.handle)
        self._runner = web.AppRunner(app)
        await self._runner.setup()
        await web.TCPSite(self._runner, "127.0.0.1", self.port).start()

    async def stop(self) -> None:
        if self._runner is not None:
            await self._runner.cleanup()

    def delivered(self, thread: str) -> list[Attempt]:
        return [
            a for a in self.attempts if a.answered == 200 and a.body["data"]["thread_id"] == thread
        ]

    async def wait_for(self, thread: str, count: int, timeout_s: float = 30.0) -> list[Attempt]:
        deadline = time.monotonic() + timeout_s
        while len(self.delivered(thread)) < count:
            assert time.monotonic() < deadline, [a.body["type"] for a in self.attempts]
            await asyncio.sleep(0.05)
        return self.delivered(thread)


def webhook_settings(database_url: str, url: str, secret: str) -> Settings:
    return Settings(  # type: ignore[call-arg]
        database_url=database_url,
        write_confirmation="off",
        handoff_webhook_url=url,
        handoff_webhook_secret=secret,
        handoff_webhook_backoff_base_s=BASE_S,
        handoff_webhook_backoff_cap_s=CAP_S,
        _env_file=None,
    )


# One class's: the replicas of TestReceiverDown must be the only ones delivering.
@pytest.fixture(scope="class")
def receiver() -> Receiver:
    return Receiver(KEY)


@pytest.fixture(scope="class")
def server(
    database_url: str, scripted_model_session: ScriptedModelServer, receiver: Receiver
) -> Iterator[LiveServer]:
    with live_server(
        webhook_settings(database_url, receiver.url, WHSEC), scripted_model_session
    ) as live:
        yield live


@pytest.fixture
async def client(
    server: LiveServer, db: AsyncConnectionPool[Any], receiver: Receiver
) -> AsyncIterator[httpx.AsyncClient]:
    await load_small_shop(db)
    receiver.attempts.clear()
    async with server.client() as c:
        yield c


async def take_over_and_back(
    client: httpx.AsyncClient, server: LiveServer, model: ScriptedModelServer, session: str
) -> str:
    """Handoff, accept, one customer message while held, release with a note."""
    model.use(
        Script(
            [
                Reply.call("transfer_to_human_agents", summary="wants a person about a refund"),
                Reply.say("I have transferred you to a colleague."),
            ]
        )
    )
    h = server.headers(NOAH)
    posted = await client.post(
        f"/threads/{session}/messages", json={"content": "a human please"}, headers=h
    )
    assert posted.json()["status"] == "completed", posted.text
    thread = f"{NOAH}:{session}"
    secret = server.settings.jwt_secret.get_secret_value()
    alice = {"Authorization": f"Bearer {issue_token(secret, ALICE, role='staff', name='Alice')}"}
    control = (await client.get(f"/staff/threads/{thread}", headers=alice)).json()["control"]
    accepted = await client.post(
        f"/staff/threads/{thread}/control",
        json={"action": "accept", "version": control["version"]},
        headers=alice,
    )
    assert accepted.status_code == 200, accepted.text
    held = await client.post(
        f"/threads/{session}/messages", json={"content": "are you there?"}, headers=h
    )
    assert held.json()["status"] == "handed_off"
    released = await client.post(
        f"/staff/threads/{thread}/control",
        json={"action": "release", "version": accepted.json()["version"], "note": "refunded"},
        headers=alice,
    )
    assert released.status_code == 200, released.text
    return thread


async def outbox_rows(db: AsyncConnectionPool[Any], thread: str) -> list[dict[str, Any]]:
    async with db.connection() as conn:
        cur = await conn.execute(
            "SELECT * FROM webhook_outbox WHERE thread_id = %s ORDER BY id", (thread,)
        )
        return list(await cur.fetchall())


async def delivered_rows(db: AsyncConnectionPool[Any], thread: str) -> list[dict[str, Any]]:
    """The thread's rows once each is recorded as delivered: the worker records a delivery
    after it reads the answer, a moment after the receiver has it."""
    deadline = time.monotonic() + 10
    while True:
        rows = await outbox_rows(db, thread)
        if all(r["delivered_at"] is not None for r in rows):
            return rows
        assert time.monotonic() < deadline, rows
        await asyncio.sleep(0.05)


class TestEvents:
    async def test_a_takeover_sends_its_four_events_in_order_each_signed(
        self,
        client: httpx.AsyncClient,
        server: LiveServer,
        receiver: Receiver,
        scripted_model_session: ScriptedModelServer,
        db: AsyncConnectionPool[Any],
    ) -> None:
        await receiver.start()
        try:
            thread = await take_over_and_back(client, server, scripted_model_session, "hook-1")
            delivered = await receiver.wait_for(thread, 4)
        finally:
            await receiver.stop()

        assert [a.body["type"] for a in delivered] == SEQUENCE
        assert all(a.valid for a in delivered)
        assert len({a.id for a in delivered}) == 4
        queued, accepted, message, released = (a.body["data"] for a in delivered)
        assert queued["summary"] == "wants a person about a refund"
        assert queued["action"] == "handoff" and queued["actor"] == "agent"
        assert queued["customer"] == NOAH and queued["session_id"] == "hook-1"
        assert accepted["assignee"] == ALICE and accepted["action"] == "accept"
        assert message["message"]["content"] == "are you there?"
        assert message["state"] == "human"
        assert released["state"] == "agent" and released["note"] == "refunded"
        assert all(a.body["data"]["thread_id"] == thread for a in delivered)
        rows = await delivered_rows(db, thread)
        assert [r["event_id"] for r in rows] == [a.id for a in delivered]
        assert all(r["attempts"] == 1 for r in rows)

    async def test_a_thread_kept_by_the_agent_sends_nothing(
        self,
        client: httpx.AsyncClient,
        server: LiveServer,
        scripted_model_session: ScriptedModelServer,
        db: AsyncConnectionPool[Any],
    ) -> None:
        scripted_model_session.use(Script([Reply.say("Hello!")]))
        posted = await client.post(
            "/threads/hook-2/messages", json={"content": "hi"}, headers=server.headers(NOAH)
        )
        assert posted.json()["status"] == "completed"
        assert await outbox_rows(db, f"{NOAH}:hook-2") == []


class TestReceiverDown:
    async def test_every_event_arrives_once_by_id_after_the_receiver_comes_back(
        self,
        database_url: str,
        db: AsyncConnectionPool[Any],
        scripted_model_session: ScriptedModelServer,
    ) -> None:
        # two replicas deliver from the same outbox; the receiver is not even listening yet
        receiver = Receiver(PLAIN.encode())
        settings = webhook_settings(database_url, receiver.url, PLAIN)
        with (
            live_server(settings, scripted_model_session) as one,
            live_server(settings, scripted_model_session),
        ):
            await load_small_shop(db)
            async with one.client() as client:
                thread = await take_over_and_back(client, one, scripted_model_session, "down")
            await asyncio.sleep(2.0)  # refused connections, retried
            tried = await outbox_rows(db, thread)
            receiver.fail_until = time.monotonic() + 3.0  # then up, but answering 500
            await receiver.start()
            try:
                delivered = await receiver.wait_for(thread, 4)
                await asyncio.sleep(CAP_S + POLL_S)  # time for a duplicate to show
            finally:
                await receiver.stop()

        assert tried[0]["attempts"] >= 2 and tried[0]["delivered_at"] is None
        assert tried[0]["last_error"] == "ConnectError"
        assert [a.body["type"] for a in delivered] == SEQUENCE
        assert all(a.valid for a in receiver.attempts)
        assert len([a.id for a in receiver.delivered(thread)]) == 4  # none twice
        refused_with_500 = [a for a in receiver.attempts if a.answered == 500]
        assert refused_with_500, "the receiver was meant to fail for a while"
        assert {a.id for a in refused_with_500} <= {a.id for a in delivered}  # same ids
        first = [a.at for a in receiver.attempts if a.id == delivered[0].id]
        gaps = [later - earlier for earlier, later in itertools.pairwise(first)]
        assert max(gaps) <= CAP_S + POLL_S + 0.5  # backoff capped
        rows = await delivered_rows(db, thread)
        assert rows[0]["event_id"] == tried[0]["event_id"] == delivered[0].id


class TestSettings:
    def test_a_whsec_secret_is_its_base64_bytes_and_a_plain_one_its_text(self) -> None:
        assert webhook_signing_key(WHSEC) == KEY
        assert webhook_signing_key(PLAIN) == PLAIN.encode()
        with pytest.raises(ValueError):
            webhook_signing_key("whsec_not base64!")

    def test_prod_refuses_a_webhook_url_without_a_strong_secret(self) -> None:
        prod: dict[str, Any] = {
            "app_env": "prod",
            "jwt_secret": "x" * 40,
            "llm_provider": "openai",
            "handoff_webhook_url": "https://helpdesk.example/hooks",
            "_env_file": None,
        }
        with pytest.raises(ValidationError, match="HANDOFF_WEBHOOK_SECRET"):
            Settings(**prod)
        with pytest.raises(ValidationError, match="HANDOFF_WEBHOOK_SECRET"):
            Settings(**prod, handoff_webhook_secret="short")
        assert Settings(**prod, handoff_webhook_secret=WHSEC).handoff_webhook_secret

    def test_retries_back_off_exponentially_up_to_the_cap(self) -> None:
        assert [backoff_s(n, 1.0, 30.0) for n in range(1, 8)] == [1, 2, 4, 8, 16, 30, 30]
        assert Settings(_env_file=None).handoff_webhook_backoff_cap_s == 30  # type: ignore[call-arg]
