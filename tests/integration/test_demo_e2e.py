"""The demo model end to end: a real uvicorn server whose lifespan builds the demo model,
the real graph calling it, real tools on real Postgres, SSE read with httpx-sse."""

from __future__ import annotations

import json
import socket
import threading
import time
import uuid
from collections.abc import AsyncIterator, Iterator
from dataclasses import dataclass
from typing import Any

import httpx
import pytest
import uvicorn
from httpx_sse import aconnect_sse
from psycopg_pool import AsyncConnectionPool

from app.api.auth import issue_token
from app.config import Settings
from app.help.repository import sync_help_articles
from app.identity import Role
from app.main import create_app
from tests.integration.agent_harness import fetch_one, load_small_shop
from tests.integration.test_guest_identity import emailed_code

NOAH = "noah_brown_6181"
NOAH_EMAIL = "noah.brown7922@example.com"
PENDING = "#W2611340"  # one Water Bottle, 32.00, paid with paypal_5727330
SSE = {"Accept": "text/event-stream"}


class DemoApp:
    """The app as `cs-agent serve` runs it with no model configured, on a free port."""

    def __init__(self, settings: Settings) -> None:
        self.settings = settings
        self._sock = socket.socket(socket.AF_INET, socket.SOCK_STREAM)
        self._sock.bind(("127.0.0.1", 0))
        self.url = f"http://127.0.0.1:{self._sock.getsockname()[1]}"
        config = uvicorn.Config(create_app(settings), log_level="warning", lifespan="on")
        self._server = uvicorn.Server(config)
        self._thread = threading.Thread(
            target=self._server.run, kwargs={"sockets": [self._sock]}, daemon=True
        )

    def __enter__(self) -> DemoApp:
        self._thread.start()
        deadline = time.monotonic() + 30
        while not self._server.started:
            if time.monotonic() > deadline or not self._thread.is_alive():
                raise RuntimeError("the app did not start")
            time.sleep(0.02)
        return self

    def __exit__(self, *exc: object) -> None:
        self._server.should_exit = True
        self._thread.join(timeout=30)
        self._sock.close()
        assert not self._thread.is_alive(), "the app (and its demo model) did not shut down"

    def headers(self, user_id: str, role: Role = "customer") -> dict[str, str]:
        token = issue_token(self.settings.jwt_secret.get_secret_value(), user_id, role=role)
        return {"Authorization": f"Bearer {token}"}


@pytest.fixture(scope="module")
def app(database_url: str) -> Iterator[DemoApp]:
    settings = Settings(
        database_url=database_url,
        app_env="dev",
        llm_provider="demo",
        # paced like the real thing, only faster; slow enough that tokens arrive one by one
        # (the SSE stream merges tokens that queue up behind a write)
        demo_model_tokens_per_s=400,
        # and each batch its own frame: at 400 tokens/s, SSE_FRAME_MS would join ~12 words a
        # frame (frames are tested in tests/unit/test_run_plumbing.py::TestFrames)
        sse_frame_ms=0,
        _env_file=None,
    )
    with DemoApp(settings) as running:
        yield running


@pytest.fixture
async def shop(db: AsyncConnectionPool[Any]) -> AsyncConnectionPool[Any]:
    await load_small_shop(db)
    return db


@pytest.fixture
async def client(app: DemoApp, shop: Any) -> AsyncIterator[httpx.AsyncClient]:
    async with httpx.AsyncClient(base_url=app.url, timeout=30) as c:
        yield c


@dataclass
class Turn:
    events: list[tuple[str, dict[str, Any]]]

    def named(self, name: str) -> list[dict[str, Any]]:
        return [data for event, data in self.events if event == name]

    @property
    def text(self) -> str:
        return "".join(e["text"] for e in self.named("token"))

    @property
    def calls(self) -> list[tuple[str, dict[str, Any]]]:
        return [(e["name"], e["args"]) for e in self.named("tool_call")]

    @property
    def status(self) -> str:
        done = self.named("done")
        assert len(done) == 1 and self.events[-1][0] == "done", self.events
        return str(done[0]["status"])


@dataclass
class Session:
    client: httpx.AsyncClient
    headers: dict[str, str]
    id: str

    async def _post(self, path: str, body: dict[str, Any]) -> Turn:
        events = []
        async with aconnect_sse(
            self.client, "POST", path, json=body, headers={**self.headers, **SSE}
        ) as source:
            assert source.response.status_code == 200, await source.response.aread()
            async for sse in source.aiter_sse():
                events.append((sse.event, json.loads(sse.data)))
        turn = Turn(events)
        assert not turn.named("error"), turn.events
        return turn

    async def say(self, text: str) -> Turn:
        return await self._post(f"/threads/{self.id}/messages", {"content": text})

    async def decide(self, decision: str) -> Turn:
        return await self._post(f"/threads/{self.id}/resume", {"decision": decision})


def session(
    client: httpx.AsyncClient, app: DemoApp, user_id: str, role: Role = "customer"
) -> Session:
    return Session(client, app.headers(user_id, role), uuid.uuid4().hex[:16])


async def order_status(pool: AsyncConnectionPool[Any], order_id: str) -> str:
    row = await fetch_one(pool, "SELECT status FROM orders WHERE id = %s", order_id)
    return str(row["status"])


class TestLabelling:
    async def test_readyz_names_the_demo_model(self, client: httpx.AsyncClient) -> None:
        response = await client.get("/readyz")
        assert response.status_code == 200
        assert response.json()["model"] == "demo"


class TestAnswers:
    async def test_order_status_is_answered_from_the_database(
        self, client: httpx.AsyncClient, app: DemoApp
    ) -> None:
        turn = await session(client, app, NOAH).say(f"Where is my order {PENDING}?")
        assert turn.calls == [("get_order_details", {"order_id": PENDING})]
        assert turn.named("tool_result")[0]["status"] == "ok"
        assert f"Order {PENDING} is pending." in turn.text
        assert "- Water Bottle (" in turn.text and "Total: 32.00." in turn.text
        assert len(turn.named("token")) > 10  # streamed word by word
        assert turn.status == "completed"

    async def test_shipping_estimate_in_chinese(
        self, client: httpx.AsyncClient, app: DemoApp
    ) -> None:
        turn = await session(client, app, NOAH).say("运费 2公斤 300公里")
        assert turn.calls == [("calc_shipping", {"distance_km": 300, "weight_kg": 2})]
        assert turn.text == "2公斤、300公里的运费是 249.00 CNY。"

    async def test_listing_orders_reads_the_user_id_from_the_system_prompt(
        self, client: httpx.AsyncClient, app: DemoApp
    ) -> None:
        turn = await session(client, app, NOAH).say("list my orders")
        assert turn.calls == [("get_user_details", {"user_id": NOAH})]
        assert "#W7678072, #W2611340" in turn.text


class TestHelpCentre:
    async def test_a_policy_question_is_answered_from_the_article_it_cites(
        self, client: httpx.AsyncClient, app: DemoApp, shop: AsyncConnectionPool[Any]
    ) -> None:
        await sync_help_articles(shop)  # the test database starts with none
        turn = await session(client, app, NOAH).say("How long do refunds take?")
        assert turn.calls == [
            ("search_help_center", {"query": "How long do refunds take?"}),
            ("get_help_article", {"article_id": "refund-timing"}),
        ]
        assert turn.status == "completed"
        cited = [c["id"] for e in turn.named("citations") for c in e["citations"]]
        assert cited == ["refund-timing"]
        assert "From our help article 'How long do refunds take?':" in turn.text
        assert "depends on the payment method" in turn.text


class TestCancel:
    async def test_approved_cancellation_cancels_the_order(
        self, client: httpx.AsyncClient, app: DemoApp, shop: AsyncConnectionPool[Any]
    ) -> None:
        chat = session(client, app, NOAH)
        asked = await chat.say(f"Please cancel order {PENDING}, I ordered it by mistake")
        assert asked.status == "interrupted"
        pending = asked.named("interrupt")[0]["pending"]
        assert [p["name"] for p in pending] == ["cancel_pending_order"]
        assert pending[0]["args"] == {"order_id": PENDING, "reason": "ordered by mistake"}
        assert await order_status(shop, PENDING) == "pending"

        done = await chat.decide("approve")
        assert done.status == "completed"
        assert f"order {PENDING} is cancelled" in done.text
        # The payment method as the confirmation card named it, not its internal id.
        assert "refund 32.00 to PayPal" in pending[0]["summary"]
        assert "32.00 goes back to PayPal" in done.text and "paypal_5727330" not in done.text
        assert await order_status(shop, PENDING) == "cancelled"

    async def test_declined_cancellation_changes_nothing(
        self, client: httpx.AsyncClient, app: DemoApp, shop: AsyncConnectionPool[Any]
    ) -> None:
        chat = session(client, app, NOAH)
        assert "no longer needed" in (await chat.say(f"cancel {PENDING}")).text
        confirm = await chat.say("ordered by mistake")
        assert "reply yes to confirm" in confirm.text and not confirm.calls
        assert (await chat.say("yes")).status == "interrupted"

        done = await chat.decide("reject")
        assert done.named("tool_result")[0]["content"].startswith("Declined")
        assert done.text == "Okay, I didn't change anything."
        assert await order_status(shop, PENDING) == "pending"

    async def test_a_cancel_its_rule_refuses_is_explained_not_offered(
        self, client: httpx.AsyncClient, app: DemoApp, shop: AsyncConnectionPool[Any]
    ) -> None:
        chat = session(client, app, NOAH)
        turn = await chat.say("Please cancel order #W7678072, I ordered it by mistake")
        assert turn.status == "completed" and not turn.named("interrupt")
        (result,) = turn.named("tool_result")
        assert result["status"] == "error" and "only pending orders" in result["content"]
        assert "only pending orders can be cancelled" in turn.text
        assert await order_status(shop, "#W7678072") == "delivered"


class TestGuest:
    """Under the old rules the email alone verified the guest and showed the order; now an
    order id + email give its status only, and the emailed code verifies."""

    async def test_a_guest_with_order_id_and_email_gets_the_status_only(
        self, client: httpx.AsyncClient, app: DemoApp
    ) -> None:
        chat = session(client, app, f"guest-{uuid.uuid4().hex[:8]}", role="guest")
        asked = await chat.say(f"where is my order {PENDING}?")
        assert not asked.calls and "email address" in asked.text

        answered = await chat.say(f"It's {NOAH_EMAIL}")
        assert answered.calls == [
            ("get_order_status", {"order_id": PENDING, "email": NOAH_EMAIL}),
        ]
        assert answered.text.startswith(f"Order {PENDING} is pending.")
        assert "Water Bottle" not in answered.text and "32.00" not in answered.text
        state = await client.get(f"/threads/{chat.id}/state", headers=chat.headers)
        assert state.json()["verified_user_id"] is None

    async def test_a_guest_is_verified_by_the_emailed_code_and_then_cancels(
        self, client: httpx.AsyncClient, app: DemoApp, shop: AsyncConnectionPool[Any]
    ) -> None:
        chat = session(client, app, f"guest-{uuid.uuid4().hex[:8]}", role="guest")
        asked = await chat.say(f"Please cancel order {PENDING}, I ordered it by mistake")
        assert not asked.calls and "email address" in asked.text

        sent = await chat.say(f"It's {NOAH_EMAIL}")
        assert sent.calls == [("find_user_id_by_email", {"email": NOAH_EMAIL})]
        assert "6-digit code" in sent.text
        state = await client.get(f"/threads/{chat.id}/state", headers=chat.headers)
        assert state.json()["verified_user_id"] is None

        code = await emailed_code(shop, NOAH_EMAIL)
        confirmed = await chat.say(code)
        assert confirmed.calls == [
            ("confirm_identity", {"code": code}),
            ("cancel_pending_order", {"order_id": PENDING, "reason": "ordered by mistake"}),
        ]
        assert confirmed.status == "interrupted"
        state = await client.get(f"/threads/{chat.id}/state", headers=chat.headers)
        assert state.json()["verified_user_id"] == NOAH
        done = await chat.decide("approve")
        assert f"order {PENDING} is cancelled" in done.text
        assert await order_status(shop, PENDING) == "cancelled"


class TestOtherChanges:
    async def test_address_change_reaches_the_tool_with_parsed_fields(
        self, client: httpx.AsyncClient, app: DemoApp, shop: AsyncConnectionPool[Any]
    ) -> None:
        chat = session(client, app, NOAH)
        asked = await chat.say(
            f"Change the address of {PENDING} to 123 Main St, Apt 4, Austin, TX, USA, 78701"
        )
        assert asked.status == "interrupted"
        done = await chat.decide("approve")
        assert "will now ship to 123 Main St, Apt 4, Austin, TX 78701, USA" in done.text
        row = await fetch_one(shop, "SELECT city, zip FROM orders WHERE id = %s", PENDING)
        assert row == {"city": "Austin", "zip": "78701"}

    async def test_return_everything_to_the_original_payment_method(
        self, client: httpx.AsyncClient, app: DemoApp, shop: AsyncConnectionPool[Any]
    ) -> None:
        chat = session(client, app, NOAH)
        asked = await chat.say("I'd like to return everything from #W7678072")
        assert [name for name, _ in asked.calls] == [
            "get_order_details",
            "return_delivered_order_items",
        ]
        assert asked.calls[1][1]["payment_method_id"] == "credit_card_7815826"
        done = await chat.decide("approve")
        assert "return of T-Shirt, Hiking Boots" in done.text and "239.94" in done.text
        assert await order_status(shop, "#W7678072") == "return requested"

    async def test_transfer_to_a_human(self, client: httpx.AsyncClient, app: DemoApp) -> None:
        chat = session(client, app, NOAH)
        asked = await chat.say("转人工")
        assert [name for name, _ in asked.calls] == ["transfer_to_human_agents"]
        assert asked.status == "completed" and not asked.named("interrupt")  # nothing to approve
        assert "已为您转接人工客服" in asked.text
        # The thread now waits for a person (human takeover): the next message is stored
        # for them, and the agent does not answer it.
        after = await chat.say("还在吗？")
        assert after.status == "handed_off" and after.named("stored")

    async def test_after_a_person_hands_back_the_agent_answers_again(
        self, client: httpx.AsyncClient, app: DemoApp
    ) -> None:
        chat = session(client, app, NOAH)
        assert (await chat.say("I want to talk to a human")).status == "completed"
        thread, staff = f"{NOAH}:{chat.id}", app.headers("staff-demo", role="staff")
        for action in ("accept", "release"):
            control = (await client.get(f"/staff/threads/{thread}", headers=staff)).json()
            changed = await client.post(
                f"/staff/threads/{thread}/control",
                json={"action": action, "version": control["control"]["version"]},
                headers=staff,
            )
            assert changed.status_code == 200, changed.text

        turn = await chat.say("what are my orders?")
        assert turn.status == "completed"
        assert "A human colleague has this conversation" not in turn.text
        assert turn.calls == [("get_user_details", {"user_id": NOAH})]
        state = (await client.get(f"/threads/{chat.id}/state", headers=chat.headers)).json()
        assert state["handed_off"] is False
