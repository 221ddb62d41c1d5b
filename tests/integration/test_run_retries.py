"""A failed turn is retryable with its client_message_id; a turn has a deadline."""

from __future__ import annotations

import json
import time
from collections.abc import AsyncIterator, Iterator
from typing import Any

import httpx
import pytest
from httpx_sse import aconnect_sse
from psycopg_pool import AsyncConnectionPool

from app.config import Settings
from tests.fakellm import Latency, Reply, Script, ScriptedModelServer
from tests.integration.agent_harness import load_small_shop
from tests.integration.api_harness import LiveServer, live_server

NOAH = "noah_brown_6181"
PENDING_ORDER = "#W2611340"


@pytest.fixture(scope="module")
def server(database_url: str, scripted_model_session: ScriptedModelServer) -> Iterator[LiveServer]:
    settings = Settings(  # type: ignore[call-arg]
        database_url=database_url, turn_deadline_s=1.5, _env_file=None
    )
    with live_server(settings, scripted_model_session) as live:
        yield live


@pytest.fixture
async def client(
    server: LiveServer, db: AsyncConnectionPool[Any]
) -> AsyncIterator[httpx.AsyncClient]:
    await load_small_shop(db)
    async with server.client() as c:
        yield c


async def stream(
    client: httpx.AsyncClient, path: str, body: dict[str, Any], headers: dict[str, str]
) -> list[tuple[str, dict[str, Any]]]:
    events = []
    sse_headers = {**headers, "Accept": "text/event-stream"}
    async with aconnect_sse(client, "POST", path, json=body, headers=sse_headers) as source:
        async for sse in source.aiter_sse():
            events.append((sse.event, json.loads(sse.data)))
    return events


async def transcript(client: httpx.AsyncClient, session: str, h: dict[str, str]) -> list[str]:
    state = (await client.get(f"/threads/{session}/state", headers=h)).json()
    return [m["role"] for m in state["messages"]]


class TestAFailedTurnIsRetried:
    async def test_the_first_model_call_failed(
        self, client: httpx.AsyncClient, server: LiveServer, model_server: ScriptedModelServer
    ) -> None:
        model_server.use(Script([Reply.fail(500), Reply.say("Here now.")]))
        h = server.headers(NOAH)
        body = {"content": "hello?", "client_message_id": "r-1"}
        failed = (await client.post("/threads/retry-first/messages", json=body, headers=h)).json()
        assert failed["status"] == "failed"
        retried = (await client.post("/threads/retry-first/messages", json=body, headers=h)).json()
        assert retried["status"] == "completed"
        assert await transcript(client, "retry-first", h) == ["user", "assistant"]
        replayed = (await client.post("/threads/retry-first/messages", json=body, headers=h)).json()
        assert replayed == retried  # only now, completed, is it replayed
        assert len(model_server.requests) == 2

    async def test_the_model_failed_after_a_tool_round(
        self, client: httpx.AsyncClient, server: LiveServer, model_server: ScriptedModelServer
    ) -> None:
        """The question, the call and its result were stored: the retry goes on from there
        instead of asking again."""
        model_server.use(
            Script(
                [
                    Reply.call("get_order_details", order_id=PENDING_ORDER),
                    Reply.fail(500),
                    Reply.say("It is pending."),
                ]
            )
        )
        h = server.headers(NOAH)
        body = {"content": f"status of {PENDING_ORDER}?", "client_message_id": "r-2"}
        failed = (await client.post("/threads/retry-tool/messages", json=body, headers=h)).json()
        assert failed["status"] == "failed"
        retried = (await client.post("/threads/retry-tool/messages", json=body, headers=h)).json()
        assert retried["status"] == "completed"
        assert await transcript(client, "retry-tool", h) == [
            "user",
            "assistant",
            "tool",
            "assistant",
        ]
        assert len(model_server.requests) == 3


class TestTurnDeadline:
    async def test_a_turn_past_its_deadline_ends_and_frees_the_thread(
        self, client: httpx.AsyncClient, server: LiveServer, model_server: ScriptedModelServer
    ) -> None:
        model_server.use(
            lambda r: Reply.say("word " * 200), latency=Latency(tokens_per_s=20)
        )  # ten seconds of answer against a deadline of 1.5
        h = server.headers(NOAH)
        started = time.monotonic()
        events = await stream(client, "/threads/deadline-1/messages", {"content": "talk"}, h)
        took = time.monotonic() - started
        assert [e[0] for e in events][-2:] == ["error", "done"]
        assert events[-2][1]["code"] == "deadline_exceeded"
        assert events[-1][1]["status"] == "failed"
        assert took < 4
        assert await transcript(client, "deadline-1", h) == []  # nothing half-written
        model_server.use(lambda r: Reply.say("Quick."), latency=Latency())
        after = await client.post("/threads/deadline-1/messages", json={"content": "hi"}, headers=h)
        assert after.status_code == 200 and after.json()["status"] == "completed"
