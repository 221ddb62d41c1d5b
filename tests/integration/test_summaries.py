"""Long threads: summaries fold old messages away, the transcript keeps all of them."""

from __future__ import annotations

from collections.abc import Iterator
from typing import Any

import httpx
import pytest
from psycopg_pool import AsyncConnectionPool

from app.agent.summary import SUMMARY_SYSTEM, cut_point, key_facts, with_facts
from app.config import Settings
from tests.fakellm import ChatRequest, Reply, ScriptedModelServer
from tests.integration.agent_harness import load_small_shop
from tests.integration.api_harness import LiveServer, live_server

NOAH = "noah_brown_6181"


def is_summary_request(request: ChatRequest) -> bool:
    return request.system_prompt.startswith(SUMMARY_SYSTEM[:40])


class Shop:
    """A scripted model: agent turns echo the question; summaries come from `summaries`."""

    def __init__(self, summaries: list[Reply]) -> None:
        self.summaries = summaries
        self.summary_requests: list[ChatRequest] = []
        self.agent_requests: list[ChatRequest] = []

    def __call__(self, request: ChatRequest) -> Reply:
        if is_summary_request(request):
            self.summary_requests.append(request)
            return self.summaries.pop(0) if self.summaries else Reply.say("summary")
        self.agent_requests.append(request)
        return Reply.say(f"Noted about {request.last_user_text()} " + "detail " * 30)


@pytest.fixture(scope="module")
def server(database_url: str, scripted_model_session: ScriptedModelServer) -> Iterator[LiveServer]:
    settings = Settings(  # type: ignore[call-arg]
        database_url=database_url,
        app_env="dev",
        summary_trigger_tokens=300,
        summary_keep_tokens=120,
        _env_file=None,
    )
    with live_server(settings, scripted_model_session) as live:
        yield live


@pytest.fixture
async def client(server: LiveServer, db: AsyncConnectionPool[Any]) -> Any:
    await load_small_shop(db)
    async with server.client() as c:
        yield c


async def say(client: httpx.AsyncClient, server: LiveServer, sid: str, text: str) -> dict[str, Any]:
    r = await client.post(
        f"/threads/{sid}/messages", json={"content": text}, headers=server.headers(NOAH)
    )
    assert r.status_code == 200, r.text
    body: dict[str, Any] = r.json()
    return body


class TestTranscript:
    async def test_transcript_is_complete_after_three_summaries(
        self, client: httpx.AsyncClient, server: LiveServer, model_server: ScriptedModelServer
    ) -> None:
        policy = Shop([Reply.say(f"summary {i}") for i in range(10)])
        model_server.use(policy)
        questions = [f"question {i} about order #W26113{i:02d}" for i in range(12)]
        for q in questions:
            await say(client, server, "long", q)
        assert len(policy.summary_requests) >= 3

        h = server.headers(NOAH)
        full = (await client.get("/threads/long/state", headers=h)).json()
        users = [m["content"] for m in full["messages"] if m["role"] == "user"]
        assert users == questions
        assert len(full["messages"]) == 24
        working = (await client.get("/threads/long/state?view=working", headers=h)).json()
        assert len(working["messages"]) < len(full["messages"])
        assert working["summary"].startswith("summary")
        # the newest summary reaches the model through the system prompt
        assert working["summary"].splitlines()[0] in policy.agent_requests[-1].system_prompt

    async def test_summary_keeps_ids_and_amounts_verbatim(
        self, client: httpx.AsyncClient, server: LiveServer, model_server: ScriptedModelServer
    ) -> None:
        # the model's summary forgets the specifics; the service puts them back
        policy = Shop([Reply.say("The customer asked about an order.")])
        model_server.use(policy)
        await say(client, server, "facts", "refund 1,463.70 for #W5918442 to credit_card_7815826")
        for i in range(4):
            await say(client, server, "facts", f"and another question {i}")
        state = (
            await client.get("/threads/facts/state?view=working", headers=server.headers(NOAH))
        ).json()
        summary = state["summary"]
        for fact in ("#W5918442", "1,463.70", "credit_card_7815826"):
            assert fact in summary

    async def test_summariser_failure_keeps_messages_and_retries_later(
        self, client: httpx.AsyncClient, server: LiveServer, model_server: ScriptedModelServer
    ) -> None:
        policy = Shop([Reply.fail(500), Reply.fail(500), Reply.say("recovered summary")])
        model_server.use(policy)
        results = [await say(client, server, "flaky", f"q{i}") for i in range(8)]
        assert all(r["status"] == "completed" for r in results)
        state = (await client.get("/threads/flaky/state", headers=server.headers(NOAH))).json()
        assert [m["content"] for m in state["messages"] if m["role"] == "user"] == [
            f"q{i}" for i in range(8)
        ]
        working = (
            await client.get("/threads/flaky/state?view=working", headers=server.headers(NOAH))
        ).json()
        assert working["summary"] and working["summary"].startswith("recovered summary")


class TestPieces:
    def test_key_facts_and_with_facts(self) -> None:
        from langchain_core.messages import HumanMessage

        msgs = [HumanMessage(content="order #W1234567 paid 1,463.70 by gift_card_123, 2024-05-01")]
        facts = key_facts(msgs)
        assert facts == ["#W1234567", "gift_card_123", "2024-05-01", "1,463.70"]
        assert with_facts("about #W1234567", facts).endswith(
            "Key facts: gift_card_123, 2024-05-01, 1,463.70"
        )

    def test_cut_point_starts_on_a_user_message(self) -> None:
        from langchain_core.messages import AIMessage, HumanMessage, ToolMessage

        msgs = [
            HumanMessage(content="a " * 100),
            AIMessage(content="", tool_calls=[{"name": "t", "args": {}, "id": "1"}]),
            ToolMessage(content="r " * 100, tool_call_id="1"),
            AIMessage(content="b"),
            HumanMessage(content="c"),
            AIMessage(content="d"),
        ]
        assert cut_point(msgs, 50) == 4
        assert cut_point(msgs, 10_000) == 0


class TestRewindKeepsTheTranscript:
    async def test_rewind_after_summaries_returns_the_whole_transcript(
        self, client: httpx.AsyncClient, server: LiveServer, model_server: ScriptedModelServer
    ) -> None:
        policy = Shop([Reply.say(f"summary {i}") for i in range(10)])
        model_server.use(policy)
        for i in range(8):
            await say(client, server, "rw", f"question {i}")
        assert policy.summary_requests, "the thread should have been summarised"
        h = server.headers(NOAH)
        full = (await client.get("/threads/rw/state", headers=h)).json()
        last_user = [m for m in full["messages"] if m["role"] == "user"][-1]
        r = await client.post("/threads/rw/rewind", json={"message_id": last_user["id"]}, headers=h)
        assert r.status_code == 200
        # the same view GET /state gives: every earlier message, archived ones included
        assert [m["content"] for m in r.json()["messages"]] == [
            m["content"] for m in full["messages"][:-2]
        ]
        again = (await client.get("/threads/rw/state", headers=h)).json()
        assert again["messages"] == r.json()["messages"]
