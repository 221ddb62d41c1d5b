"""A model server that misbehaves on the wire: every turn still ends, on time and clean.

The service runs under uvicorn with its own production model client (`build_chat_model`:
ChatOpenAI, the openai SDK on aiohttp) pointed at the scripted model server, which hangs,
drips keepalives, resets, truncates or answers in the wrong shape. Each such turn must end
with `error` then `done(failed)` within `LLM_CALL_DEADLINE_S`, leave no half-written
answer in the thread, and leave the thread free for the next message.
"""

from __future__ import annotations

import asyncio
import json
import time
from collections.abc import Callable, Iterator
from typing import Any

import httpx
import pytest
from httpx_sse import aconnect_sse
from langchain_core.messages import HumanMessage
from psycopg_pool import AsyncConnectionPool
from pydantic import SecretStr, ValidationError

from app.agent.graph import stream_turn
from app.agent.llm import ModelCallTimeout, ModelReplyBroken
from app.agent.summary import SUMMARY_SYSTEM
from app.config import Settings
from app.db.checkpointer import run_batching
from app.identity import AgentContext
from tests.fakellm import ChatRequest, Policy, Reply, Script, ScriptedModelServer, StreamFault
from tests.integration.agent_harness import Conversation, load_small_shop, make_graph
from tests.integration.api_harness import LiveServer

NOAH = "noah_brown_6181"
SSE = {"Accept": "text/event-stream"}
DEADLINE_S = 2.0
# Far above the deadline: only the deadline may end a hang or a drip.
READ_TIMEOUT_S = 30.0
RETRIES = 2
# What a turn may take beyond the model's deadline on two shared cores.
SLACK_S = 3.0
ANSWER = "Your order #W2611340 is pending and will ship within two days."
RECOVERED = "Sorry about that, I am back. How can I help?"
AGAIN = "are you there?"

Events = list[tuple[str, dict[str, Any]]]


@pytest.fixture(scope="module")
def server(database_url: str, scripted_model_session: ScriptedModelServer) -> Iterator[LiveServer]:
    settings = Settings(  # type: ignore[call-arg]
        database_url=database_url,
        app_env="dev",
        llm_provider="openai",
        openai_base_url=scripted_model_session.base_url,
        openai_api_key=SecretStr("sk-test"),
        llm_call_deadline_s=DEADLINE_S,
        llm_timeout_s=READ_TIMEOUT_S,
        llm_max_retries=RETRIES,
        summary_trigger_tokens=300,
        summary_keep_tokens=120,
        rate_limit_posts_per_minute=0,
        _env_file=None,
    )
    live = LiveServer(settings, model=None).start()  # the service builds its own model
    try:
        yield live
    finally:
        live.stop()


@pytest.fixture
async def client(server: LiveServer, db: AsyncConnectionPool[Any]) -> Any:
    await load_small_shop(db)
    async with server.client() as c:
        yield c


async def turn(
    client: httpx.AsyncClient, server: LiveServer, sid: str, text: str
) -> tuple[Events, float]:
    """One turn over SSE, its events and its time; it must end well within the deadline."""
    events: Events = []
    started = time.monotonic()
    async with asyncio.timeout(DEADLINE_S + SLACK_S):
        async with aconnect_sse(
            client,
            "POST",
            f"/threads/{sid}/messages",
            json={"content": text},
            headers={**server.headers(NOAH), **SSE},
        ) as source:
            assert source.response.status_code == 200, await source.response.aread()
            async for sse in source.aiter_sse():
                events.append((sse.event, json.loads(sse.data)))
    return events, time.monotonic() - started


async def assistant_texts(client: httpx.AsyncClient, server: LiveServer, sid: str) -> list[str]:
    r = await client.get(f"/threads/{sid}/state", headers=server.headers(NOAH))
    assert r.status_code == 200, r.text
    return [m["content"] for m in r.json()["messages"] if m["role"] == "assistant"]


def fails_until_asked_again(reply: Reply) -> Policy:
    """`reply` to the first message, a good answer to the next one."""

    def policy(request: ChatRequest) -> Reply:
        return Reply.say(RECOVERED) if request.last_user_text() == AGAIN else reply

    return policy


def burst(*statuses: int) -> Policy:
    return Script([Reply.fail(s) for s in statuses], then=lambda r: Reply.say(RECOVERED))


# (policy, requests the failed turn makes, whether only the deadline can end it)
FAULTS: dict[str, tuple[Callable[[], Policy], int, bool]] = {
    "hang": (lambda: fails_until_asked_again(Reply.broken(StreamFault.hang())), 1, True),
    "drip": (
        lambda: fails_until_asked_again(Reply.broken(StreamFault.drip(1.0), ANSWER)),
        1,
        True,
    ),
    "reset": (
        lambda: fails_until_asked_again(Reply.broken(StreamFault.reset(after_chunks=4), ANSWER)),
        1,
        False,
    ),
    "truncated": (
        lambda: fails_until_asked_again(Reply.broken(StreamFault.truncate(), ANSWER)),
        1,
        False,
    ),
    "truncated-mid-sentence": (
        lambda: fails_until_asked_again(Reply.broken(StreamFault.truncate(after_chunks=5), ANSWER)),
        1,
        False,
    ),
    "chunks-without-choices": (
        lambda: fails_until_asked_again(Reply.broken(StreamFault.wrong_schema(), ANSWER)),
        1,
        False,
    ),
    "json-body-not-a-completion": (
        lambda: fails_until_asked_again(Reply.broken(StreamFault.plain_json(), ANSWER)),
        1,
        False,
    ),
    "500-burst-past-the-retries": (lambda: burst(500, 500, 500), RETRIES + 1, False),
    "429-burst-past-the-retries": (lambda: burst(429, 429, 429), RETRIES + 1, False),
}


class TestBrokenModelCallsFailTheTurn:
    @pytest.mark.parametrize("fault", list(FAULTS))
    async def test_the_turn_fails_in_time_and_leaves_nothing_half_written(
        self,
        client: httpx.AsyncClient,
        server: LiveServer,
        model_server: ScriptedModelServer,
        fault: str,
    ) -> None:
        policy, tries, needs_deadline = FAULTS[fault]
        model_server.use(policy())
        sid = f"fault-{fault}"

        events, seconds = await turn(client, server, sid, "where is my order #W2611340?")

        names = [name for name, _ in events]
        assert names[-2:] == ["error", "done"], events
        assert events[-2][1]["code"] == "model_unavailable"
        assert events[-1][1]["status"] == "failed"
        assert len(model_server.requests) == tries
        if needs_deadline:
            assert seconds >= DEADLINE_S * 0.9
        assert await assistant_texts(client, server, sid) == []

        # the thread is free, and the next answer is whole
        events, _ = await turn(client, server, sid, AGAIN)
        assert events[-1][1]["status"] == "completed", events
        assert "".join(data["text"] for name, data in events if name == "token") == RECOVERED
        assert await assistant_texts(client, server, sid) == [RECOVERED]


class TestShortBurstsAreRetried:
    @pytest.mark.parametrize("statuses", [(429, 500), (503,), (429, 429)])
    async def test_a_burst_shorter_than_the_retries_still_completes(
        self,
        client: httpx.AsyncClient,
        server: LiveServer,
        model_server: ScriptedModelServer,
        statuses: tuple[int, ...],
    ) -> None:
        model_server.use(burst(*statuses))
        sid = "burst-" + "-".join(map(str, statuses))

        events, _ = await turn(client, server, sid, "hello")

        assert events[-1][1]["status"] == "completed", events
        assert len(model_server.requests) == len(statuses) + 1
        assert await assistant_texts(client, server, sid) == [RECOVERED]


def is_summary_request(request: ChatRequest) -> bool:
    return (request.system_prompt or "").startswith(SUMMARY_SYSTEM[:40])


class TestTheSummariserHasTheSameDeadline:
    @pytest.mark.parametrize(
        "fault",
        [StreamFault.hang(), StreamFault.drip(0.5), StreamFault.truncate(after_chunks=3)],
        ids=["hang", "drip", "truncated"],
    )
    async def test_a_broken_summary_call_ends_in_time_and_keeps_every_message(
        self,
        client: httpx.AsyncClient,
        server: LiveServer,
        model_server: ScriptedModelServer,
        fault: StreamFault,
    ) -> None:
        summaries: list[ChatRequest] = []

        def policy(request: ChatRequest) -> Reply:
            if is_summary_request(request):
                summaries.append(request)
                return Reply.broken(fault, "The customer asked about their order and")
            return Reply.say(f"Noted about {request.last_user_text()} " + "detail " * 30)

        model_server.use(policy)
        sid = f"summary-{fault.kind}"
        questions: list[str] = []
        while not summaries:
            assert len(questions) < 8, "the thread should have been summarised"
            questions.append(f"question {len(questions)}")
            events, _ = await turn(client, server, sid, questions[-1])
            # the summary failed, the answer stands
            assert events[-1][1]["status"] == "completed", events

        r = await client.get(f"/threads/{sid}/state?view=working", headers=server.headers(NOAH))
        working = r.json()
        assert working["summary"] is None
        assert [m["content"] for m in working["messages"] if m["role"] == "user"] == questions


class TestTheErrorReachesTheRunAsTheSdksType:
    """In process, through LangGraph's stream as the run service reads it."""

    @pytest.mark.parametrize(
        ("fault", "error"),
        [
            (StreamFault.drip(0.2), ModelCallTimeout),
            (StreamFault.truncate(after_chunks=3), ModelReplyBroken),
            (StreamFault.wrong_schema(), ModelReplyBroken),
        ],
        ids=["drip", "truncated", "wrong-schema"],
    )
    async def test_the_graph_stream_raises_the_model_error(
        self,
        db: AsyncConnectionPool[Any],
        settings: Settings,
        model_server: ScriptedModelServer,
        fault: StreamFault,
        error: type[Exception],
    ) -> None:
        await load_small_shop(db)
        model_server.use(lambda r: Reply.broken(fault, ANSWER))
        quick = settings.model_copy(update={"llm_call_deadline_s": 1.0})
        chat = Conversation(make_graph(db, model_server, quick), quick)
        context = AgentContext(user_id=chat.user_id, role="customer", thread_id=chat.thread_id)
        graph_input = {"incoming": HumanMessage("where is my order?", id="h1")}

        with pytest.raises(error):
            async with asyncio.timeout(5), run_batching(chat.graph.checkpointer):  # type: ignore[arg-type]
                async for _ in stream_turn(chat.graph, graph_input, chat.config, context):
                    pass

        state = await chat.state()
        assert state.values.get("messages", []) == []


class TestTheSetting:
    @pytest.mark.parametrize("value", [0, -1])
    def test_the_deadline_must_be_positive(self, value: float) -> None:
        with pytest.raises(ValidationError, match="llm_call_deadline_s"):
            Settings(llm_call_deadline_s=value, _env_file=None)  # type: ignore[call-arg]

    def test_the_default_leaves_room_for_a_long_answer(self) -> None:
        assert Settings(_env_file=None).llm_call_deadline_s == 120  # type: ignore[call-arg]
