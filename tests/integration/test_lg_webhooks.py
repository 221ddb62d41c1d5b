"""Run webhooks through the official Python SDK (`runs.create/stream/wait(..., webhook=URL)`):
a real receiver on its own port gets each finished run's final state, signed as Standard
Webhooks does (checked here independently of the app, with the secret the service
generated and kept in the database), once per delivery id, also after being down for a
while; a URL to a private address is refused with a typed 422, and a name that points
inside at send time is never connected to."""

from __future__ import annotations

import asyncio
import base64
import hashlib
import hmac
import json
import time
from collections.abc import AsyncIterator, Iterator
from dataclasses import dataclass, field
from typing import Any

import pytest
from aiohttp import web
from langgraph_sdk.client import LangGraphClient
from langgraph_sdk.errors import UnprocessableEntityError
from psycopg_pool import AsyncConnectionPool

from app.config import Settings, webhook_signing_key
from app.notify.webhooks import Claimed, WebhookWorker
from tests.fakellm import Reply, Script, ScriptedModelServer
from tests.integration.api_harness import LiveServer, live_server
from tests.integration.test_lg_python_sdk import cancel_order_script
from tests.integration.test_webhooks import free_port

BASE_S, CAP_S = 0.25, 1.0  # quick retries for the tests (shipped: 1 s, capped at 30 s)
ASK = {"input": {"messages": [{"type": "human", "content": "hello"}]}}


@dataclass
class Delivery:
    id: str
    timestamp: str
    signature: str
    answered: int
    raw: bytes

    @property
    def body(self) -> dict[str, Any]:
        parsed: dict[str, Any] = json.loads(self.raw)
        return parsed


@dataclass
class Receiver:
    """A client's endpoint: records every request; answers 500 to the first `fail_first`.

    A count, not a deadline: under load the worker's next try can land after any
    deadline, and the receiver would never have been seen failing."""

    port: int = field(default_factory=free_port)
    fail_first: int = 0
    deliveries: list[Delivery] = field(default_factory=list)
    _runner: web.AppRunner | None = None

    @property
    def url(self) -> str:
        return f"http://127.0.0.1:{self.port}/hooks/runs"

    async def handle(self, request: web.Request) -> web.Response:
        status = 500 if len(self.deliveries) < self.fail_first else 200
        self.deliveries.append(
            Delivery(
                id=request.headers["webhook-id"],
                timestamp=request.headers["webhook-timestamp"],
                signature=request.headers["webhook-signature"],
                answered=status,
                raw=await request.read(),
            )
        )
        return web.Response(status=status)

    async def start(self) -> None:
        app = web.Application()
        app.router.add_post("/hooks/runs", self.handle)
        self._runner = web.AppRunner(app)
        await self._runner.setup()
        await web.TCPSite(self._runner, "127.0.0.1", self.port).start()

    async def stop(self) -> None:
        if self._runner is not None:
            await self._runner.cleanup()
            self._runner = None

    def delivered(self, run_id: str) -> list[Delivery]:
        return [d for d in self.deliveries if d.answered == 200 and d.body["run_id"] == run_id]

    async def wait_for(self, run_ids: list[str], timeout_s: float = 30.0) -> None:
        deadline = time.monotonic() + timeout_s
        while not all(self.delivered(r) for r in run_ids):
            assert time.monotonic() < deadline, [d.body.get("run_id") for d in self.deliveries]
            await asyncio.sleep(0.05)


def verified(key: bytes, delivery: Delivery) -> bool:
    signed = f"{delivery.id}.{delivery.timestamp}.".encode() + delivery.raw
    expected = base64.b64encode(hmac.new(key, signed, hashlib.sha256).digest())
    given = [p.split(",", 1)[1].encode() for p in delivery.signature.split() if p[:3] == "v1,"]
    return any(hmac.compare_digest(expected, g) for g in given)


async def generated_key(db: AsyncConnectionPool[Any]) -> bytes:
    async with db.connection() as conn:
        cur = await conn.execute("SELECT secret FROM webhook_keys WHERE name = 'runs'")
        row = await cur.fetchone()
    assert row is not None and row["secret"].startswith("whsec_")
    return webhook_signing_key(row["secret"])


def hook_settings(database_url: str) -> Settings:
    return Settings(  # type: ignore[call-arg]
        database_url=database_url,
        webhook_allowed_hosts="127.0.0.1",  # the receiver's; nothing else private
        handoff_webhook_backoff_base_s=BASE_S,
        handoff_webhook_backoff_cap_s=CAP_S,
        _env_file=None,
    )


@pytest.fixture(scope="module")
def server(database_url: str, scripted_model_session: ScriptedModelServer) -> Iterator[LiveServer]:
    with live_server(hook_settings(database_url), scripted_model_session) as live:
        yield live


@pytest.fixture
async def receiver() -> AsyncIterator[Receiver]:
    r = Receiver()
    yield r
    await r.stop()


async def outbox_row(db: AsyncConnectionPool[Any], run_id: str) -> dict[str, Any]:
    """The run's event (enqueued in the statement that ended the run)."""
    async with db.connection() as conn:
        cur = await conn.execute("SELECT * FROM webhook_outbox WHERE run_id = %s", (run_id,))
        row = await cur.fetchone()
    assert row is not None
    return dict(row)


class TestDelivery:
    async def test_each_finished_run_is_posted_once_per_delivery_id_signed(
        self,
        noah: LangGraphClient,
        receiver: Receiver,
        model_server: ScriptedModelServer,
        db: AsyncConnectionPool[Any],
    ) -> None:
        await receiver.start()
        model_server.use(
            Script([Reply.say("First answer."), Reply.say("Second."), Reply.say("Third.")])
        )
        thread_id = (await noah.threads.create())["thread_id"]
        waited = await noah.runs.wait(thread_id, "agent", webhook=receiver.url, **ASK)
        created = await noah.runs.create(
            thread_id, "agent", webhook=receiver.url, metadata={"channel": "web"}, **ASK
        )
        await noah.runs.join(thread_id, created["run_id"])
        streamed = [
            p async for p in noah.runs.stream(thread_id, "agent", webhook=receiver.url, **ASK)
        ]
        runs = await noah.runs.list(thread_id)
        run_ids = [r["run_id"] for r in reversed(runs)]
        assert created["run_id"] == run_ids[1] and streamed[0].data["run_id"] == run_ids[2]
        await receiver.wait_for(run_ids)

        key = await generated_key(db)
        bodies = []
        for run_id in run_ids:
            (delivery,) = receiver.delivered(run_id)
            assert verified(key, delivery)
            bodies.append(delivery.body)
        assert len({d.id for d in receiver.deliveries}) == 3  # one id per run
        first, second, third = bodies
        assert waited["messages"][-1]["content"] == "First answer."
        assert first["values"] == waited  # the state the run ended on, as /wait gives it
        for body, answer in zip(bodies, ("First answer.", "Second.", "Third."), strict=True):
            assert body["thread_id"] == thread_id and body["status"] == "success"
            assert body["values"]["messages"][-1] == {
                **body["values"]["messages"][-1],
                "type": "ai",
                "content": answer,
            }
            assert body["run_started_at"] <= body["run_ended_at"]
            assert "error" not in body
        assert second["metadata"]["channel"] == "web"
        assert second["assistant_id"] == runs[0]["assistant_id"]
        assert len(third["values"]["messages"]) == 6  # the whole transcript

    async def test_a_paused_run_reports_its_interrupt(
        self,
        noah: LangGraphClient,
        receiver: Receiver,
        model_server: ScriptedModelServer,
    ) -> None:
        await receiver.start()
        model_server.use(cancel_order_script())
        thread_id = (await noah.threads.create())["thread_id"]
        paused = await noah.runs.wait(thread_id, "agent", webhook=receiver.url, **ASK)
        (run,) = await noah.runs.list(thread_id)
        await receiver.wait_for([run["run_id"]])
        (delivery,) = receiver.delivered(run["run_id"])
        assert delivery.body["values"] == paused
        assert delivery.body["values"]["__interrupt__"][0]["value"]["action_requests"]

    async def test_a_receiver_down_for_a_while_gets_the_run_after_under_its_one_id(
        self,
        noah: LangGraphClient,
        receiver: Receiver,
        model_server: ScriptedModelServer,
        db: AsyncConnectionPool[Any],
    ) -> None:
        model_server.use(Script([Reply.say("While you were away.")]))
        thread_id = (await noah.threads.create())["thread_id"]
        await noah.runs.wait(thread_id, "agent", webhook=receiver.url, **ASK)  # nobody listens
        (run,) = await noah.runs.list(thread_id)
        deadline = time.monotonic() + 20
        while (refused := await outbox_row(db, run["run_id"]))["attempts"] < 2:
            assert time.monotonic() < deadline, refused
            await asyncio.sleep(0.1)
        assert refused["delivered_at"] is None
        assert refused["last_error"] == "ConnectError"

        receiver.fail_first = 2  # then up, answering 500 twice
        await receiver.start()
        await receiver.wait_for([run["run_id"]])
        assert [d.answered for d in receiver.deliveries] == [500, 500, 200]
        assert {d.id for d in receiver.deliveries} == {refused["event_id"]}
        assert len(receiver.delivered(run["run_id"])) == 1
        assert len({d.raw for d in receiver.deliveries}) == 1  # the same bytes every time
        deadline = time.monotonic() + 10  # the worker records it once the answer is read
        while (delivered := await outbox_row(db, run["run_id"]))["delivered_at"] is None:
            assert time.monotonic() < deadline, delivered
            await asyncio.sleep(0.05)
        assert delivered["attempts"] > 3


class TestRefused:
    @pytest.mark.parametrize(
        "url",
        [
            "http://10.0.0.1/hooks",  # private
            "http://169.254.169.254/latest/meta-data",  # link-local (cloud metadata)
            "http://[::1]:8080/hooks",  # loopback, not listed
            "http://localhost/hooks",  # a name, not listed
            "ftp://127.0.0.1/hooks",  # not http(s)
            "not a url",
        ],
    )
    async def test_a_url_that_may_not_be_sent_to_is_a_typed_422_and_no_run(
        self, noah: LangGraphClient, server: LiveServer, url: str
    ) -> None:
        thread_id = (await noah.threads.create())["thread_id"]
        async with server.client() as raw:
            answer = await raw.post(
                f"/lg/threads/{thread_id}/runs",
                json={"assistant_id": "agent", "webhook": url, **ASK},
                headers={"x-api-key": server.token("noah_brown_6181")},
            )
        assert answer.status_code == 422
        assert answer.json()["error"]["code"] == "webhook_url_refused"
        with pytest.raises(UnprocessableEntityError):
            await noah.runs.create(thread_id, "agent", webhook=url, **ASK)
        assert await noah.runs.list(thread_id) == []

    async def test_a_url_that_points_inside_at_send_time_is_never_connected_to(
        self, database_url: str, db: AsyncConnectionPool[Any], receiver: Receiver
    ) -> None:
        """The check at the send, not only at the run's start: with any public host
        allowed, an event whose name resolves to a loopback address by now (DNS
        rebinding) is given up on without a connection."""
        await receiver.start()
        settings = Settings(  # type: ignore[call-arg]
            database_url=database_url, webhook_allowed_hosts="*", _env_file=None
        )

        async def never(thread_id: str, stored: dict[str, Any]) -> dict[str, Any]:
            raise AssertionError("rendered again")

        worker = WebhookWorker(db, settings, render=never)
        await worker.open()
        try:
            outcome = await worker.send_run(
                Claimed(
                    id=0,
                    event_id="msg_rebound",
                    thread_id="noah:x",
                    type="run.finished",
                    attempts=1,
                    body=b"{}",
                    url=f"http://localhost:{receiver.port}/hooks/runs",
                    rendered=True,
                )
            )
        finally:
            await worker.close()
        assert outcome.final and not outcome.delivered
        assert "private, loopback or link-local" in (outcome.error or "")
        assert receiver.deliveries == []
