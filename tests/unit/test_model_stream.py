"""A model call past LangChain's callback layer gives what `astream` gives, and takes that
layer whenever anything listens (app/agent/model_stream.py)."""

from __future__ import annotations

from typing import Any
from unittest import mock

import langsmith.utils
import pytest
from langchain_core.callbacks import AsyncCallbackHandler
from langchain_core.messages import (
    BaseMessage,
    BaseMessageChunk,
    HumanMessage,
    SystemMessage,
    message_chunk_to_message,
)
from langchain_core.runnables import Runnable, RunnableConfig
from langchain_core.tools import tool
from langchain_openai import ChatOpenAI

from app.agent import model_stream
from app.agent.llm import build_chat_model
from app.agent.model_stream import model_chunks
from app.config import Settings
from tests.fakellm import Reply, Script, ScriptedModelServer

WINDOW: list[BaseMessage] = [
    SystemMessage(content="You help customers of a shop."),
    HumanMessage(content="Where is order 1001?"),
]


@tool
def get_order_details(order_id: str) -> str:
    """Look an order up."""
    return order_id


class Tokens(AsyncCallbackHandler):
    def __init__(self) -> None:
        self.tokens: list[str] = []
        self.ended = 0

    async def on_llm_new_token(self, token: str, **kwargs: Any) -> None:
        self.tokens.append(token)

    async def on_llm_end(self, response: Any, **kwargs: Any) -> None:
        self.ended += 1


@pytest.fixture
def server(model_server: ScriptedModelServer) -> ScriptedModelServer:
    return model_server


def _model(server: ScriptedModelServer) -> ChatOpenAI:
    settings = Settings(openai_base_url=server.base_url, openai_api_key="test")
    return build_chat_model(settings)


async def _merged(
    runnable: Runnable[Any, BaseMessage], window: list[BaseMessage], config: RunnableConfig
) -> tuple[BaseMessage, list[BaseMessageChunk]]:
    chunks = [c async for c in model_chunks(runnable, window, config)]
    merged = chunks[0] + chunks[1:] if len(chunks) > 1 else chunks[0]
    return message_chunk_to_message(merged), chunks


def _comparable(message: BaseMessage) -> dict[str, Any]:
    # the provider's ids are per response; everything else must match
    dumped = message.model_dump(exclude={"id"})
    for call in dumped.get("tool_calls", []):
        call.pop("id")
    return dumped


REPLIES = [
    Reply.say("Order 1001 left the warehouse on Monday."),
    Reply.call("get_order_details", order_id="1001"),
]


class TestSameMessageEitherWay:
    @pytest.mark.parametrize("reply", REPLIES, ids=["text", "tool call"])
    async def test_the_direct_path_gives_astreams_message(
        self, server: ScriptedModelServer, reply: Reply
    ) -> None:
        model = _model(server)
        runnable = model.bind_tools([get_order_details])
        server.use(Script([reply, reply]))
        direct, chunks = await _merged(runnable, WINDOW, {})
        assert model_stream._direct_call(runnable, WINDOW, {}) is not None
        with mock.patch.object(model_stream, "_direct_call", return_value=None):
            wrapped, _ = await _merged(runnable, WINDOW, {})
        assert _comparable(direct) == _comparable(wrapped)
        assert direct.response_metadata["finish_reason"] in ("stop", "tool_calls")
        assert chunks[-1].chunk_position == "last"  # type: ignore[attr-defined]
        request = server.requests[0]
        assert [t["function"]["name"] for t in request.tools] == ["get_order_details"]


class TestListenersTakeLangChainsPath:
    async def test_a_handler_in_the_config_sees_every_token(
        self, server: ScriptedModelServer
    ) -> None:
        server.use(Script([Reply.say("Shipped on Monday.")]))
        runnable = _model(server).bind_tools([get_order_details])
        handler = Tokens()
        config: RunnableConfig = {"callbacks": [handler]}
        assert model_stream._direct_call(runnable, WINDOW, config) is None
        message, _ = await _merged(runnable, WINDOW, config)
        assert "".join(handler.tokens) == message.content == "Shipped on Monday."
        assert handler.ended == 1

    def test_tracing_from_the_environment_takes_it(
        self, server: ScriptedModelServer, monkeypatch: pytest.MonkeyPatch
    ) -> None:
        runnable = _model(server)
        assert model_stream._direct_call(runnable, WINDOW, {}) is not None
        monkeypatch.setenv("LANGSMITH_TRACING", "true")
        langsmith.utils.get_env_var.cache_clear()  # langsmith reads the environment once
        try:
            assert model_stream._direct_call(runnable, WINDOW, {}) is None
        finally:
            monkeypatch.delenv("LANGSMITH_TRACING")
            langsmith.utils.get_env_var.cache_clear()

    def test_a_model_with_its_own_callbacks_takes_it(self, server: ScriptedModelServer) -> None:
        runnable = _model(server)
        runnable.callbacks = [Tokens()]
        assert model_stream._direct_call(runnable, WINDOW, {}) is None

    def test_content_blocks_take_it(self, server: ScriptedModelServer) -> None:
        # LangChain converts blocks (images, files) for the provider; text needs nothing
        blocks = [HumanMessage(content=[{"type": "text", "text": "Where is it?"}])]
        assert model_stream._direct_call(_model(server), blocks, {}) is None

    def test_without_langchains_hook_list_it_takes_it(
        self, server: ScriptedModelServer, monkeypatch: pytest.MonkeyPatch
    ) -> None:
        # a LangChain release without the private list: the safe path, not a failed turn
        from langchain_core.tracers import context as tracer_context

        runnable = _model(server)
        assert model_stream._direct_call(runnable, WINDOW, {}) is not None
        monkeypatch.delattr(tracer_context, "_configure_hooks")
        assert model_stream._direct_call(runnable, WINDOW, {}) is None

    def test_a_model_that_is_not_chatopenai_takes_it(self) -> None:
        from langchain_core.language_models.fake_chat_models import FakeListChatModel

        assert model_stream._direct_call(FakeListChatModel(responses=["x"]), WINDOW, {}) is None


class TestGraphCallsGoDirect:
    async def test_a_graph_nodes_config_has_no_listener(self, server: ScriptedModelServer) -> None:
        # LangGraph hands each node a callback manager; without `messages` streaming or a
        # tracer it holds no handler, so the agent's model calls skip the layer.
        from langgraph.config import get_config
        from langgraph.graph import END, START, StateGraph
        from typing_extensions import TypedDict

        class State(TypedDict):
            seen: bool

        async def node(state: State) -> dict[str, bool]:
            return {"seen": model_stream._nobody_listens(get_config())}

        graph = StateGraph(State)
        graph.add_node("node", node)
        graph.add_edge(START, "node")
        graph.add_edge("node", END)
        compiled = graph.compile()
        seen: list[bool] = []
        async for update in compiled.astream({"seen": False}, stream_mode=["custom", "updates"]):
            seen.append(update[1]["node"]["seen"])
        assert seen == [True]
        out = await compiled.ainvoke({"seen": False}, {"callbacks": [Tokens()]})
        assert out["seen"] is False
