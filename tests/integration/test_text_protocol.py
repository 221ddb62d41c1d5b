"""TOOL_CALLING=react: a model without native tool calling drives the same graph."""

from __future__ import annotations

import json
from collections.abc import Iterator
from typing import Any

import pytest
from httpx_sse import aconnect_sse
from langchain_core.messages import AIMessage, ToolMessage
from psycopg_pool import AsyncConnectionPool

from app.agent.text_protocol import FORMAT_GIVE_UP
from app.config import Settings
from tests.fakellm import ChatRequest, Latency, Reply, Script, ScriptedModelServer
from tests.integration.agent_harness import Conversation, fetch_one, load_small_shop, make_graph
from tests.integration.api_harness import LiveServer, live_server

PENDING_ORDER = "#W2611340"


def action(tool: str, args: dict[str, Any], thought: str = "I should look this up.") -> Reply:
    return Reply.say(f"Thought: {thought}\nAction: {tool}\nAction Input: {json.dumps(args)}")


def final(text: str) -> Reply:
    return Reply.say(f"Thought: I have what I need.\nFinal Answer: {text}")


def observations(request: ChatRequest) -> list[str]:
    return [
        str(m.get("content"))
        for m in request.messages
        if m.get("role") == "user" and str(m.get("content")).startswith("Observation:")
    ]


def calls(values: dict[str, Any]) -> list[tuple[str, dict[str, Any]]]:
    return [
        (c["name"], dict(c["args"]))
        for m in values["messages"]
        if isinstance(m, AIMessage)
        for c in m.tool_calls
    ]


@pytest.fixture
async def conversation(
    db: AsyncConnectionPool[Any], model_server: ScriptedModelServer, settings: Settings
) -> Conversation:
    await load_small_shop(db)
    react = settings.model_copy(update={"tool_calling": "react", "observation_format": "text"})
    return Conversation(make_graph(db, model_server, react), react)


class TestTextProtocol:
    async def test_well_formed_lookup(
        self, conversation: Conversation, model_server: ScriptedModelServer
    ) -> None:
        model_server.use(
            Script(
                [
                    action("get_order_details", {"order_id": PENDING_ORDER}),
                    final("Your order is pending."),
                ]
            )
        )
        values = await conversation.say("where is my order?")
        assert calls(values) == [("get_order_details", {"order_id": PENDING_ORDER})]
        last = values["messages"][-1]
        assert last.content == "Your order is pending."
        assert last.additional_kwargs["thought"] == "I have what I need."
        first, second = model_server.requests
        assert not first.tools and "Action Input:" in first.system_prompt
        assert "get_order_details" in first.system_prompt
        (obs,) = observations(second)
        assert obs.startswith("Observation:") and f"Order {PENDING_ORDER}: pending" in obs
        # the assistant's earlier step went back as text, not as a tool call
        assert all(not m.get("tool_calls") for m in second.messages)
        # state keeps what the model read; the artifact names what the result is about
        result = next(m for m in values["messages"] if isinstance(m, ToolMessage))
        assert str(result.content).startswith(f"Order {PENDING_ORDER}: pending")
        assert result.artifact["outcome"] == "ok"
        assert result.artifact["ids"]["order"] == [PENDING_ORDER]

    @pytest.mark.parametrize(
        "sloppy",
        [
            'action :  get_order_details\naction input: {"order_id": "#W2611340"}',
            'Action: get_order_details\nAction Input:\n```json\n{"order_id": "#W2611340"}\n```',
            'Action: get_order_details\nAction Input: {"order_id": "#W2611340"}  // the order',
            "Action: get_order_details\nAction Input: #W2611340",
            'Action: Get_Order_Detail\nAction Input: {"order_id": "#W2611340"}',
        ],
    )
    async def test_sloppy_output_is_understood(
        self, conversation: Conversation, model_server: ScriptedModelServer, sloppy: str
    ) -> None:
        model_server.use(Script([Reply.say(sloppy), final("Found it.")]))
        values = await conversation.say("where is my order?")
        assert calls(values) == [("get_order_details", {"order_id": PENDING_ORDER})]
        assert values["messages"][-1].content == "Found it."

    async def test_broken_output_gets_a_format_hint_then_recovers(
        self, conversation: Conversation, model_server: ScriptedModelServer
    ) -> None:
        model_server.use(
            Script(
                [
                    Reply.say("Action: teleport_parcel\nAction Input: {}"),
                    action("get_order_details", {"order_id": PENDING_ORDER}),
                    final("It is pending."),
                ]
            )
        )
        values = await conversation.say("where is it?")
        hint = model_server.requests[1].messages[-1]
        assert hint["role"] == "user" and "could not be read" in hint["content"]
        assert calls(values) == [("get_order_details", {"order_id": PENDING_ORDER})]
        assert values["messages"][-1].content == "It is pending."

    async def test_three_broken_replies_end_the_turn_gracefully(
        self, conversation: Conversation, model_server: ScriptedModelServer
    ) -> None:
        broken = Reply.say("Action: teleport_parcel\nAction Input: {}")
        model_server.use(Script([broken, broken, broken]))
        values = await conversation.say("where is it?")
        assert values["messages"][-1].content == FORMAT_GIVE_UP
        assert len(model_server.requests) == 3

    async def test_write_goes_through_confirmation(
        self,
        conversation: Conversation,
        model_server: ScriptedModelServer,
        db: AsyncConnectionPool[Any],
    ) -> None:
        model_server.use(
            Script(
                [
                    action(
                        "cancel_pending_order",
                        {"order_id": PENDING_ORDER, "reason": "ordered by mistake"},
                    ),
                    final("Cancelled."),
                ]
            )
        )
        await conversation.say("yes cancel it")
        state = await conversation.state()
        assert state.next == ("confirm",)
        await conversation.resume("approve")
        row = await fetch_one(db, "SELECT status FROM orders WHERE id = %s", PENDING_ORDER)
        assert row["status"] == "cancelled"

    async def test_multi_step_lookup(
        self, conversation: Conversation, model_server: ScriptedModelServer
    ) -> None:
        model_server.use(
            Script(
                [
                    action("get_user_details", {"user_id": "noah_brown_6181"}),
                    action("get_order_details", {"order_id": PENDING_ORDER}),
                    final("Your latest order is pending."),
                ]
            )
        )
        values = await conversation.say("what about my orders?")
        assert [c[0] for c in calls(values)] == ["get_user_details", "get_order_details"]
        assert len(observations(model_server.requests[2])) == 2


@pytest.fixture(scope="module")
def server(database_url: str, scripted_model_session: ScriptedModelServer) -> Iterator[LiveServer]:
    settings = Settings(  # type: ignore[call-arg]
        database_url=database_url, app_env="dev", tool_calling="react", _env_file=None
    )
    with live_server(settings, scripted_model_session) as live:
        yield live


class TestStreaming:
    async def test_only_the_final_answer_streams_and_thoughts_show_in_state(
        self,
        server: LiveServer,
        model_server: ScriptedModelServer,
        db: AsyncConnectionPool[Any],
    ) -> None:
        await load_small_shop(db)
        slow = Latency(tokens_per_s=500)
        model_server.use(
            Script(
                [
                    Reply.say(
                        "Thought: I need the order.\nAction: get_order_details\n"
                        f'Action Input: {{"order_id": "{PENDING_ORDER}"}}',
                        latency=slow,
                    ),
                    Reply.say(
                        "Thought: secret reasoning\nFinal Answer: Your order is pending.",
                        latency=slow,
                    ),
                ]
            )
        )
        h = {**server.headers("noah_brown_6181"), "Accept": "text/event-stream"}
        events = []
        async with (
            server.client() as client,
            aconnect_sse(
                client, "POST", "/threads/tp/messages", json={"content": "status?"}, headers=h
            ) as source,
        ):
            async for sse in source.aiter_sse():
                events.append((sse.event, json.loads(sse.data)))
        tokens = [d["text"] for e, d in events if e == "token"]
        assert "".join(tokens).strip() == "Your order is pending."
        assert len(tokens) > 1
        assert [e for e, _ in events if e in ("tool_call", "tool_result")] == [
            "tool_call",
            "tool_result",
        ]
        async with server.client() as client:
            state = (
                await client.get("/threads/tp/state", headers=server.headers("noah_brown_6181"))
            ).json()
        answer = state["messages"][-1]
        assert answer["content"] == "Your order is pending."
        assert answer["thought"] == "secret reasoning"


class TestObservationFormatting:
    async def test_native_model_reads_the_tools_own_text_and_state_keeps_it(
        self, db: AsyncConnectionPool[Any], model_server: ScriptedModelServer, settings: Settings
    ) -> None:
        await load_small_shop(db)
        text = settings.model_copy(update={"observation_format": "text"})
        conv = Conversation(make_graph(db, model_server, text), text)
        model_server.use(
            Script([Reply.call("get_order_details", order_id=PENDING_ORDER), Reply.say("ok")])
        )
        values = await conv.say("status?")
        sent = next(m for m in model_server.requests[1].messages if m.get("role") == "tool")
        assert str(sent["content"]).startswith(f"Order {PENDING_ORDER}: pending")
        assert "32.00 CNY" in str(sent["content"])
        stored = next(m for m in values["messages"] if isinstance(m, ToolMessage))
        assert stored.content == sent["content"]
        assert stored.artifact["ids"]["customer"] == ["noah_brown_6181"]

    async def test_json_format_shows_the_tau_bench_json(
        self, db: AsyncConnectionPool[Any], model_server: ScriptedModelServer, settings: Settings
    ) -> None:
        await load_small_shop(db)
        as_json = settings.model_copy(update={"observation_format": "json"})
        conv = Conversation(make_graph(db, model_server, as_json), as_json)
        model_server.use(
            Script([Reply.call("get_order_details", order_id=PENDING_ORDER), Reply.say("ok")])
        )
        await conv.say("status?")
        sent = next(m for m in model_server.requests[1].messages if m.get("role") == "tool")
        assert json.loads(str(sent["content"]))["order_id"] == PENDING_ORDER
