"""The demo model in process: a LangChain chat model around the demo policy that the graph
calls like any other (bound tools, streamed tokens, a finish reason, token counts)."""

from __future__ import annotations

import time
from typing import Any

from langchain_core.messages import (
    AIMessage,
    AIMessageChunk,
    BaseMessage,
    HumanMessage,
    SystemMessage,
    ToolMessage,
)
from langchain_core.tools import tool

from app.agent.llm import require_finished
from app.agent.prompts import system_prompt
from app.demo.chat import ChatRequest, Reply, ToolCall
from app.demo.model import DemoChatModel, demo_chat_model
from app.identity import AgentContext
from tests.unit.test_demo_settings import make

NOAH = "noah_brown_6181"
PENDING = "#W2611340"


@tool
def get_order_details(order_id: str) -> str:
    """Look an order up."""
    return order_id


def customer_prompt() -> SystemMessage:
    return system_prompt(AgentContext(user_id=NOAH, role="customer", thread_id="t:s"), None)


def demo(tokens_per_s: float | None = None) -> DemoChatModel:
    return demo_chat_model(make(demo_model_tokens_per_s=tokens_per_s or 0))


async def streamed(model: Any, messages: list[BaseMessage]) -> list[AIMessageChunk]:
    return [chunk async for chunk in model.astream(messages)]


def merged(chunks: list[AIMessageChunk]) -> AIMessageChunk:
    total = chunks[0]
    for chunk in chunks[1:]:
        total = total + chunk
    return total


class Recording:
    """A policy that keeps what it was sent and answers as told."""

    def __init__(self, reply: Reply) -> None:
        self.reply = reply
        self.requests: list[ChatRequest] = []

    def __call__(self, request: ChatRequest) -> Reply:
        self.requests.append(request)
        return self.reply


class TestStreaming:
    async def test_streams_the_answer_word_by_word(self) -> None:
        chunks = await streamed(demo(), [HumanMessage("hello")])
        text = "".join(str(c.content) for c in chunks)
        assert text.startswith("Hi! I'm the shop's")
        assert len([c for c in chunks if c.content]) > 20
        assert len({c.id for c in chunks}) == 1  # one message, as the run's token events need

    async def test_chinese_streams_character_by_character(self) -> None:
        pieces = [str(c.content) for c in await streamed(demo(), [HumanMessage("你好")])]
        assert [p for p in pieces if p][:3] == ["您", "好", "！"]

    async def test_a_reply_ends_with_its_finish_reason_and_token_counts(self) -> None:
        message = merged(await streamed(demo(), [HumanMessage("hello")]))
        require_finished(message)
        assert message.response_metadata["finish_reason"] == "stop"
        usage = message.usage_metadata
        assert usage is not None and usage["input_tokens"] > 0 and usage["output_tokens"] > 0
        assert usage["total_tokens"] == usage["input_tokens"] + usage["output_tokens"]

    async def test_is_paced_at_the_configured_tokens_per_second(self) -> None:
        started = time.monotonic()
        chunks = await streamed(demo(tokens_per_s=400), [HumanMessage("hello")])
        assert time.monotonic() - started >= (len(chunks) - 1) / 400 * 0.9

    async def test_invoke_answers_the_whole_reply_at_once(self) -> None:
        started = time.monotonic()
        reply = await demo(tokens_per_s=5).ainvoke([HumanMessage("hello")])
        assert time.monotonic() - started < 1.0  # ~30 words at 5 a second would take 6 s
        assert isinstance(reply, AIMessage) and str(reply.content).startswith("Hi!")
        require_finished(reply)


class TestToolCalls:
    async def test_bound_tools_are_called_like_a_hosted_model_calls_them(self) -> None:
        model = demo().bind_tools([get_order_details])
        messages = [customer_prompt(), HumanMessage(f"where is my order {PENDING}?")]
        message = merged(await streamed(model, messages))
        assert message.response_metadata["finish_reason"] == "tool_calls"
        [call] = message.tool_calls
        assert (call["name"], call["args"]) == ("get_order_details", {"order_id": PENDING})
        assert call["id"]

    async def test_without_bound_tools_it_only_answers(self) -> None:
        messages = [customer_prompt(), HumanMessage(f"where is my order {PENDING}?")]
        message = merged(await streamed(demo(), messages))
        assert not message.tool_calls and message.content

    async def test_the_policy_reads_the_request_a_hosted_model_is_sent(self) -> None:
        policy = Recording(Reply.calls(ToolCall("get_order_details", {"order_id": PENDING})))
        model = DemoChatModel(policy=policy).bind_tools([get_order_details])
        history: list[BaseMessage] = [
            SystemMessage("be brief"),
            HumanMessage("where is it?"),
            AIMessage("", tool_calls=[{"name": "get_order_details", "args": {}, "id": "c1"}]),
            ToolMessage('{"status": "pending"}', tool_call_id="c1"),
        ]
        await model.ainvoke(history)
        [request] = policy.requests
        assert request.system_prompt == "be brief"
        assert request.tool_names == ["get_order_details"]
        assert request.tools[0]["function"]["parameters"]["required"] == ["order_id"]
        assert [m["role"] for m in request.messages] == ["system", "user", "assistant", "tool"]
        assert request.messages[2]["tool_calls"][0]["function"]["name"] == "get_order_details"
        assert request.messages[3] == {
            "role": "tool",
            "tool_call_id": "c1",
            "content": '{"status": "pending"}',
        }
