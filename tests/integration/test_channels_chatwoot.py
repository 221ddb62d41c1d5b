"""The Chatwoot agent bot over real HTTP both ways: the service under uvicorn with the
scripted model, and a Chatwoot stand-in (tests/integration/chatwoot_standin.py) that signs
its webhooks, records what the bot posts and echoes the bot's own messages back."""

from __future__ import annotations

import asyncio
import time
from collections.abc import Iterator
from typing import Any

import pytest
from psycopg_pool import AsyncConnectionPool
from pydantic import SecretStr

from app.analytics.sweep import SweepPolicy, sweep
from app.api.auth import issue_token
from app.config import Settings
from tests.fakellm import Reply, Script, ScriptedModelServer
from tests.fakes.fixtures import chat_model
from tests.integration.agent_harness import load_small_shop
from tests.integration.api_harness import LiveServer, live_server
from tests.integration.chatwoot_standin import ChatwootStandIn

NOAH = "noah_brown_6181"
PENDING_ORDER = "#W2611340"
TOKEN, SECRET = "bot-token-1", "chatwoot-webhook-secret"


@pytest.fixture(scope="module")
def standin() -> Iterator[ChatwootStandIn]:
    s = ChatwootStandIn(token=TOKEN, secret=SECRET).start()
    yield s
    s.stop()


@pytest.fixture(scope="module")
def server(
    database_url: str, scripted_model_session: ScriptedModelServer, standin: ChatwootStandIn
) -> Iterator[LiveServer]:
    settings = Settings(  # type: ignore[call-arg]
        database_url=database_url,
        chatwoot_base_url=standin.url,
        chatwoot_bot_token=SecretStr(TOKEN),
        chatwoot_webhook_secret=SecretStr(SECRET),
        channel_backoff_base_s=0.2,
        _env_file=None,
    )
    with live_server(settings, scripted_model_session) as live:
        standin.webhook_url = f"{live.url}/channels/chatwoot/webhook"
        yield live


@pytest.fixture
async def shop(db: AsyncConnectionPool[Any], standin: ChatwootStandIn) -> AsyncConnectionPool[Any]:
    await load_small_shop(db)
    async with db.connection() as conn:
        await conn.execute(
            "TRUNCATE channel_conversations, channel_inbox, channel_outbox, email_message_ids, "
            "channel_confirmations"
        )
    standin.posted.clear()
    standin.statuses.clear()
    standin.echoes.clear()
    return db


async def settled(pool: AsyncConnectionPool[Any], timeout_s: float = 20.0) -> None:
    """Every stored message handled and everything to send sent (or given up)."""
    deadline = time.monotonic() + timeout_s
    while time.monotonic() < deadline:
        async with pool.connection() as conn:
            cur = await conn.execute(
                "SELECT (SELECT count(*) FROM channel_inbox WHERE done_at IS NULL) + "
                "(SELECT count(*) FROM channel_outbox WHERE delivered_at IS NULL "
                "AND failed_at IS NULL) AS n"
            )
            row = await cur.fetchone()
        if row is not None and row["n"] == 0:
            return
        await asyncio.sleep(0.1)
    raise AssertionError("the channel did not settle")


def staff_headers(server: LiveServer) -> dict[str, str]:
    secret = server.settings.jwt_secret.get_secret_value()
    return {"Authorization": f"Bearer {issue_token(secret, 'staff-ann', role='staff', name='Ann')}"}


async def call(fn: Any, *args: Any, **kwargs: Any) -> Any:
    return await asyncio.to_thread(fn, *args, **kwargs)


async def count(pool: AsyncConnectionPool[Any], sql: str, *params: Any) -> int:
    async with pool.connection() as conn:
        cur = await conn.execute(sql, params)
        row = await cur.fetchone()
    assert row is not None
    return int(next(iter(row.values())))


class TestQuestions:
    async def test_a_question_is_answered_in_its_conversation_and_shows_its_channel(
        self,
        server: LiveServer,
        standin: ChatwootStandIn,
        model_server: ScriptedModelServer,
        shop: AsyncConnectionPool[Any],
    ) -> None:
        model_server.use(Script([Reply.say("Your order ships tomorrow.")]))
        got = await call(standin.incoming, 7, "where is my order?", identifier=NOAH, verified=True)
        assert got.status_code == 200 and got.json() == {"status": "stored"}
        await settled(shop)
        (answer,) = standin.in_conversation(7)
        assert answer["content"] == "Your order ships tomorrow."
        assert answer["message_type"] == "outgoing" and answer["private"] is False
        # our own reply came back as an outgoing event: acknowledged, ignored, no turn
        for _ in range(50):
            if standin.echoes:
                break
            await asyncio.sleep(0.05)
        assert standin.echoes == [200]
        assert await count(shop, "SELECT count(*) FROM channel_inbox") == 1
        assert len(model_server.requests) == 1
        # a verified identifier that is a customer id: the thread is that customer's
        async with server.client() as client:
            state = await client.get("/threads/cw-1-7/state", headers=server.headers(NOAH))
        assert state.status_code == 200, state.text
        body = state.json()
        assert body["channel"] == {
            "name": "chatwoot",
            "link": f"{standin.url}/app/accounts/1/conversations/7",
        }
        assert [m["content"] for m in body["messages"]] == [
            "where is my order?",
            "Your order ships tomorrow.",
        ]
        # analytics keep the channel with the outcome
        await sweep(shop, SweepPolicy.from_settings(server.settings, idle_min=0))
        async with server.client() as client:
            h = staff_headers(server)
            listed = await client.get("/staff/analytics/conversations", headers=h)
            summary = await client.get("/staff/analytics/summary", headers=h)
        (item,) = listed.json()["items"]
        assert item["thread_id"] == f"{NOAH}:cw-1-7" and item["channel"] == "chatwoot"
        assert summary.json()["channels"]["chatwoot"]["conversations"] == 1
        # deleting the thread takes what the channel kept of it
        async with server.client() as client:
            deleted = await client.delete("/threads/cw-1-7", headers=server.headers(NOAH))
        assert deleted.status_code == 204
        for table in ("channel_conversations", "channel_inbox", "channel_outbox"):
            assert await count(shop, f"SELECT count(*) FROM {table}") == 0

    async def test_an_unverified_identifier_is_a_guest(
        self,
        server: LiveServer,
        standin: ChatwootStandIn,
        model_server: ScriptedModelServer,
        shop: AsyncConnectionPool[Any],
    ) -> None:
        model_server.use(Script([Reply.say("Hello!")]))
        await call(standin.incoming, 8, "hi", identifier=NOAH, verified=False, contact_id=77)
        await settled(shop)
        assert [m["content"] for m in standin.in_conversation(8)] == ["Hello!"]
        async with shop.connection() as conn:
            cur = await conn.execute("SELECT user_id, role FROM channel_conversations")
            row = await cur.fetchone()
        assert row == {"user_id": "guest-cw-1-77", "role": "guest"}

    async def test_a_duplicate_delivery_is_answered_once(
        self,
        server: LiveServer,
        standin: ChatwootStandIn,
        model_server: ScriptedModelServer,
        shop: AsyncConnectionPool[Any],
    ) -> None:
        model_server.use(Script([Reply.say("Once.")]))
        first = await call(standin.incoming, 9, "hello", message_id=501, delivery="d-1")
        again = await call(standin.incoming, 9, "hello", message_id=501, delivery="d-1")
        # the same message under another delivery id: its turn is replayed, not run again
        other = await call(standin.incoming, 9, "hello", message_id=501, delivery="d-2")
        assert first.json()["status"] == "stored" and again.json()["status"] == "duplicate"
        assert other.json()["status"] == "stored"
        await settled(shop)
        assert [m["content"] for m in standin.in_conversation(9)] == ["Once."]
        assert len(model_server.requests) == 1

    async def test_a_failed_post_is_retried_and_arrives_once(
        self,
        server: LiveServer,
        standin: ChatwootStandIn,
        model_server: ScriptedModelServer,
        shop: AsyncConnectionPool[Any],
    ) -> None:
        model_server.use(Script([Reply.say("Retried.")]))
        standin.fail_next = 2
        await call(standin.incoming, 10, "hello")
        await settled(shop)
        assert [m["content"] for m in standin.in_conversation(10)] == ["Retried."]
        assert await count(shop, "SELECT max(attempts) FROM channel_outbox") == 3


class TestSignatures:
    async def test_a_wrong_or_stale_signature_is_401_and_stores_nothing(
        self, server: LiveServer, standin: ChatwootStandIn, shop: AsyncConnectionPool[Any]
    ) -> None:
        event = {"event": "message_created", "id": 1, "message_type": "incoming"}
        wrong = await call(standin.deliver, event, secret="not-the-secret")
        stale = await call(standin.deliver, event, timestamp=int(time.time()) - 301)
        for response in (wrong, stale):
            assert response.status_code == 401
            assert response.json()["error"]["code"] == "invalid_signature"
        assert await count(shop, "SELECT count(*) FROM channel_inbox") == 0


class TestConfirmation:
    async def test_a_cancel_confirmed_through_input_select(
        self,
        server: LiveServer,
        standin: ChatwootStandIn,
        model_server: ScriptedModelServer,
        shop: AsyncConnectionPool[Any],
    ) -> None:
        model_server.use(
            Script(
                [
                    Reply.call(
                        "cancel_pending_order", order_id=PENDING_ORDER, reason="ordered by mistake"
                    ),
                    Reply.say("Done: your order is cancelled."),
                ]
            )
        )
        await call(standin.incoming, 11, "cancel my order", identifier=NOAH, verified=True)
        await settled(shop)
        (question,) = standin.in_conversation(11)
        assert question["content_type"] == "input_select"
        assert [i["title"] for i in question["content_attributes"]["items"]] == [
            "Approve",
            "Decline",
        ]
        assert "Reply YES to confirm" in question["content"]
        assert PENDING_ORDER in question["content"]
        assert await _order_status(shop) == "pending"
        await call(standin.choose, 11, 9999, "approve")
        await settled(shop)
        assert [m["content"] for m in standin.in_conversation(11)][1:] == [
            "Done: your order is cancelled."
        ]
        assert await _order_status(shop) == "cancelled"

        # handled again (as after a crash before it was marked done): the resumed run's
        # recorded result is read; no second decision, model call or answer
        calls = len(model_server.requests)
        async with shop.connection() as conn:
            await conn.execute(
                "UPDATE channel_inbox SET done_at = NULL, outcome = NULL, "
                "next_attempt_at = now() WHERE kind = 'decision'"
            )
        await settled(shop)
        assert len(model_server.requests) == calls and len(standin.in_conversation(11)) == 2
        async with shop.connection() as conn:
            cur = await conn.execute("SELECT outcome FROM channel_inbox WHERE kind = 'decision'")
            assert await cur.fetchone() == {"outcome": "completed"}

    async def test_a_plain_no_declines_the_write(
        self,
        server: LiveServer,
        standin: ChatwootStandIn,
        model_server: ScriptedModelServer,
        shop: AsyncConnectionPool[Any],
    ) -> None:
        model_server.use(
            Script(
                [
                    Reply.call(
                        "cancel_pending_order", order_id=PENDING_ORDER, reason="ordered by mistake"
                    ),
                    Reply.say("All right, I left your order as it is."),
                ]
            )
        )
        await call(standin.incoming, 12, "cancel my order", identifier=NOAH, verified=True)
        await settled(shop)
        await call(standin.incoming, 12, "no", identifier=NOAH, verified=True)
        await settled(shop)
        last = standin.in_conversation(12)[-1]
        assert last["content"] == "All right, I left your order as it is."
        assert await _order_status(shop) == "pending"


class TestHandoff:
    async def test_a_handoff_opens_the_conversation_and_the_bot_stays_quiet_until_pending(
        self,
        server: LiveServer,
        standin: ChatwootStandIn,
        model_server: ScriptedModelServer,
        shop: AsyncConnectionPool[Any],
    ) -> None:
        model_server.use(
            Script(
                [
                    Reply.call("transfer_to_human_agents", summary="wants a person about a refund"),
                    Reply.say("I have transferred you to a colleague."),
                ]
            )
        )
        await call(standin.incoming, 13, "a human please", identifier=NOAH, verified=True)
        await settled(shop)  # a handoff asks no confirmation: it changes no order
        messages = standin.in_conversation(13)
        assert [m["content"] for m in messages if not m["private"]] == [
            "I have transferred you to a colleague."
        ]
        (note,) = [m for m in messages if m["private"]]
        assert "wants a person about a refund" in note["content"]
        assert standin.in_conversation(13, "toggle_status") == [{"status": "open"}]
        async with server.client() as client:
            control = await client.get("/threads/cw-1-13/control", headers=server.headers(NOAH))
        assert control.json()["state"] == "human" and control.json()["assignee"] == "chatwoot"
        async with server.client() as client:
            queue = await client.get("/staff/threads?control=human", headers=staff_headers(server))
        (held,) = queue.json()["items"]
        assert held["channel"] == "chatwoot"
        assert held["channel_link"] == f"{standin.url}/app/accounts/1/conversations/13"

        calls = len(model_server.requests)
        got = await call(standin.incoming, 13, "hello? anyone?", identifier=NOAH, verified=True)
        assert got.json()["status"] == "stored"
        await settled(shop)
        assert len(model_server.requests) == calls  # no model call
        assert len(standin.in_conversation(13)) == len(messages)  # no bot answer
        async with server.client() as client:
            state = await client.get("/threads/cw-1-13/state", headers=server.headers(NOAH))
        assert state.json()["messages"][-1]["content"] == "hello? anyone?"

        # the people in Chatwoot hand it back (status pending): the bot answers again
        await call(standin.status_changed, 13, "pending")
        await settled(shop)
        model_server.use(Script([Reply.say("I am back.")]))
        await call(standin.incoming, 13, "thanks", identifier=NOAH, verified=True)
        await settled(shop)
        assert standin.in_conversation(13)[-1]["content"] == "I am back."

    async def test_an_open_conversation_is_chatwoots_people_and_gets_no_bot_answer(
        self,
        server: LiveServer,
        standin: ChatwootStandIn,
        model_server: ScriptedModelServer,
        shop: AsyncConnectionPool[Any],
    ) -> None:
        """A person opened the conversation in Chatwoot (not our handoff): the bot keeps
        quiet (chatwoot#11429) until it is pending again."""
        got = await call(standin.incoming, 16, "hi", identifier=NOAH, verified=True, status="open")
        assert got.json()["status"] == "stored"
        await settled(shop)
        assert model_server.requests == [] and standin.in_conversation(16) == []
        async with server.client() as client:
            control = await client.get("/threads/cw-1-16/control", headers=server.headers(NOAH))
            state = await client.get("/threads/cw-1-16/state", headers=server.headers(NOAH))
        assert control.json()["state"] == "human" and control.json()["assignee"] == "chatwoot"
        assert [m["content"] for m in state.json()["messages"]] == ["hi"]
        await call(standin.status_changed, 16, "pending")
        model_server.use(Script([Reply.say("How can I help?")]))
        await call(standin.incoming, 16, "hello bot", identifier=NOAH, verified=True)
        await settled(shop)
        assert [m["content"] for m in standin.in_conversation(16)] == ["How can I help?"]

    async def test_a_message_of_a_conversation_set_back_to_pending_is_answered(
        self,
        server: LiveServer,
        standin: ChatwootStandIn,
        model_server: ScriptedModelServer,
        shop: AsyncConnectionPool[Any],
    ) -> None:
        """Chatwoot tells an agent bot of no `pending` status change: the next message's
        conversation status says the people handed it back."""
        model_server.use(
            Script(
                [
                    Reply.call("transfer_to_human_agents", summary="wants a person"),
                    Reply.say("A colleague will answer."),
                    Reply.say("Back with you."),
                ]
            )
        )
        await call(standin.incoming, 17, "a human please", identifier=NOAH, verified=True)
        await settled(shop)
        assert standin.statuses[17] == "open"
        await call(standin.incoming, 17, "still there?", identifier=NOAH, verified=True)
        await settled(shop)
        assert standin.in_conversation(17)[-1]["private"]  # the note: no bot answer since
        standin.set_status(17, "pending")  # a person hands it back in Chatwoot
        await call(standin.incoming, 17, "hello", identifier=NOAH, verified=True)
        await settled(shop)
        assert standin.in_conversation(17)[-1]["content"] == "Back with you."

    async def test_the_console_releases_a_thread_chatwoot_holds(
        self,
        server: LiveServer,
        standin: ChatwootStandIn,
        model_server: ScriptedModelServer,
        shop: AsyncConnectionPool[Any],
    ) -> None:
        model_server.use(
            Script(
                [
                    Reply.call("transfer_to_human_agents", summary="wants a person"),
                    Reply.say("A colleague will answer."),
                    Reply.say("Back with you."),
                ]
            )
        )
        await call(standin.incoming, 14, "a human please", identifier=NOAH, verified=True)
        await settled(shop)
        path = f"/staff/threads/{NOAH}:cw-1-14/channel/release"
        async with server.client() as client:
            refused = await client.post(path, headers=server.headers(NOAH))
            released = await client.post(path, headers=staff_headers(server))
            again = await client.post(path, headers=staff_headers(server))
        assert refused.status_code == 404
        assert released.status_code == 200 and released.json()["state"] == "agent"
        assert again.status_code == 409
        await settled(shop)
        assert standin.in_conversation(14, "toggle_status") == [
            {"status": "open"},
            {"status": "pending"},
        ]
        await call(standin.incoming, 14, "hello", identifier=NOAH, verified=True)
        await settled(shop)
        assert standin.in_conversation(14)[-1]["content"] == "Back with you."

    async def test_a_person_who_takes_over_in_the_console_writes_to_chatwoot(
        self,
        server: LiveServer,
        standin: ChatwootStandIn,
        model_server: ScriptedModelServer,
        shop: AsyncConnectionPool[Any],
    ) -> None:
        model_server.use(Script([Reply.say("Hello.")]))
        await call(standin.incoming, 15, "hi", identifier=NOAH, verified=True)
        await settled(shop)
        thread, h = f"{NOAH}:cw-1-15", staff_headers(server)
        async with server.client() as client:
            control = (await client.get(f"/staff/threads/{thread}/control", headers=h)).json()
            took = await client.post(
                f"/staff/threads/{thread}/control",
                json={"action": "take_over", "version": control["version"]},
                headers=h,
            )
            assert took.status_code == 200, took.text
            said = await client.post(
                f"/staff/threads/{thread}/messages", json={"content": "Ann here."}, headers=h
            )
            assert said.status_code == 200, said.text
        await settled(shop)
        assert [m["content"] for m in standin.in_conversation(15)] == ["Hello.", "Ann here."]


async def _order_status(pool: AsyncConnectionPool[Any]) -> str:
    async with pool.connection() as conn:
        cur = await conn.execute("SELECT status FROM orders WHERE id = %s", (PENDING_ORDER,))
        row = await cur.fetchone()
    assert row is not None
    return str(row["status"])


class TestTwoReplicas:
    async def test_messages_to_either_replica_are_answered_once_each(
        self,
        server: LiveServer,
        standin: ChatwootStandIn,
        model_server: ScriptedModelServer,
        shop: AsyncConnectionPool[Any],
    ) -> None:
        model_server.use(Script([Reply.say("Answered.") for _ in range(6)]))
        other = LiveServer(server.settings, chat_model(model_server, streaming=True)).start()
        first_url = standin.webhook_url
        try:
            for i, conversation in enumerate((31, 32, 33, 31, 32, 33)):
                replica = server if i % 2 == 0 else other
                standin.webhook_url = f"{replica.url}/channels/chatwoot/webhook"
                got = await call(standin.incoming, conversation, f"question {i}")
                assert got.json()["status"] == "stored"
            await settled(shop)
        finally:
            standin.webhook_url = first_url
            other.stop()
        for conversation in (31, 32, 33):
            assert [m["content"] for m in standin.in_conversation(conversation)] == [
                "Answered.",
                "Answered.",
            ]
        assert len(model_server.requests) == 6
