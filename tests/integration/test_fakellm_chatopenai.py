"""The real `ChatOpenAI` client against the scripted model server."""

from __future__ import annotations

import asyncio
import json
import time
from typing import Any

import httpx
import openai
import pytest
from langchain_core.messages import (
    AIMessage,
    AIMessageChunk,
    HumanMessage,
    SystemMessage,
    ToolMessage,
)
from langchain_core.tools import tool

from app.demo import chat
from tests.fakellm import Fault, Latency, Reply, Router, Script, ScriptedModelServer, ToolCall
from tests.fakes import scenarios
from tests.fakes.fixtures import chat_model, model_server, scripted_model_session

__all__ = ["model_server", "scripted_model_session"]  # fixtures, re-exported for pytest


def stream_all(model: Any, prompt: Any) -> tuple[list[AIMessageChunk], AIMessageChunk]:
    chunks = list(model.stream(prompt))
    total = chunks[0]
    for chunk in chunks[1:]:
        total = total + chunk
    return chunks, total


class TestStreamingText:
    def test_text_arrives_in_several_chunks_and_reassembles(
        self, model_server: ScriptedModelServer
    ) -> None:
        model_server.use(Script([Reply.say("Your order is on its way.")]))
        chunks, total = stream_all(chat_model(model_server, streaming=True), "hi")

        assert len([c for c in chunks if c.content]) == 6
        assert total.content == "Your order is on its way."
        assert total.response_metadata["finish_reason"] == "stop"

    def test_streamed_usage_is_reported(self, model_server: ScriptedModelServer) -> None:
        model_server.use(Script([Reply.say("Hello there friend")]))
        _, total = stream_all(chat_model(model_server), "where is my order #W1234567")

        usage = total.usage_metadata
        assert usage is not None
        assert usage["input_tokens"] == chat.prompt_tokens(model_server.requests[0])
        assert usage["output_tokens"] == chat.estimate_tokens("Hello there friend")
        assert usage["total_tokens"] == usage["input_tokens"] + usage["output_tokens"]

    def test_non_streaming_reply_carries_text_and_usage(
        self, model_server: ScriptedModelServer
    ) -> None:
        model_server.use(Script([Reply.say("Plain answer")]))
        message = chat_model(model_server).invoke("hi")

        assert message.content == "Plain answer"
        assert message.usage_metadata is not None
        assert message.usage_metadata["input_tokens"] > 0
        assert model_server.requests[0].stream is False

    async def test_async_streaming_works_too(self, model_server: ScriptedModelServer) -> None:
        model_server.use(Script([Reply.say("async words here")]))
        chunks = [c async for c in chat_model(model_server, streaming=True).astream("hi")]

        assert "".join(str(c.content) for c in chunks) == "async words here"


class TestToolCalls:
    @pytest.mark.parametrize("streaming", [True, False])
    def test_a_tool_call_reassembles_into_name_and_arguments(
        self, model_server: ScriptedModelServer, streaming: bool
    ) -> None:
        model_server.use(Script([Reply.call("calc_shipping", distance_km=300, weight_kg=2)]))
        message = chat_model(model_server, streaming=streaming).invoke("shipping?")

        assert isinstance(message, AIMessage)
        assert [(c["name"], c["args"]) for c in message.tool_calls] == [
            ("calc_shipping", {"distance_km": 300, "weight_kg": 2})
        ]
        assert message.tool_calls[0]["id"]
        assert message.response_metadata["finish_reason"] == "tool_calls"

    @pytest.mark.parametrize("streaming", [True, False])
    def test_two_parallel_calls_come_back_in_one_message(
        self, model_server: ScriptedModelServer, streaming: bool
    ) -> None:
        model_server.use(scenarios.two_parallel_reads("#W5918442", "6086499569"))
        message = chat_model(model_server, streaming=streaming).invoke("status and product?")

        assert isinstance(message, AIMessage)
        assert [(c["name"], c["args"]) for c in message.tool_calls] == [
            ("get_order_details", {"order_id": "#W5918442"}),
            ("get_product_details", {"product_id": "6086499569"}),
        ]
        assert len({c["id"] for c in message.tool_calls}) == 2

    def test_streamed_arguments_are_split_across_chunks(
        self, model_server: ScriptedModelServer
    ) -> None:
        model_server.use(Script([Reply.call("get_order_details", order_id="#W1234567")]))
        chunks, _ = stream_all(chat_model(model_server, streaming=True), "where?")

        pieces = [tc["args"] for c in chunks for tc in c.tool_call_chunks if tc["args"]]
        assert len(pieces) > 2
        assert json.loads("".join(pieces)) == {"order_id": "#W1234567"}

    @pytest.mark.parametrize("streaming", [True, False])
    def test_malformed_arguments_become_invalid_tool_calls(
        self, model_server: ScriptedModelServer, streaming: bool
    ) -> None:
        bad = '{"order_id": W1234567}'  # an unterminated object would be "repaired"
        model_server.use(Script([Reply.calls(ToolCall("get_order_details", bad))]))
        message = chat_model(model_server, streaming=streaming).invoke("where?")

        assert isinstance(message, AIMessage)
        assert message.tool_calls == []
        assert [(c["name"], c["args"]) for c in message.invalid_tool_calls] == [
            ("get_order_details", bad)
        ]


class TestFaults:
    def test_rate_limit_surfaces_without_retries(self, model_server: ScriptedModelServer) -> None:
        model_server.use(Script([Reply.fail(429)]))
        with pytest.raises(openai.RateLimitError) as caught:
            chat_model(model_server).invoke("hi")

        assert caught.value.status_code == 429
        assert caught.value.code == "rate_limit_exceeded"

    def test_server_error_surfaces_after_the_clients_retries(
        self, model_server: ScriptedModelServer
    ) -> None:
        model_server.use(Script([Reply.fail(500), Reply.fail(500)]))
        with pytest.raises(openai.InternalServerError):
            chat_model(model_server, max_retries=1, streaming=True).invoke("hi")

        assert len(model_server.requests) == 2

    def test_a_rate_limit_then_success_succeeds_with_one_retry(
        self, model_server: ScriptedModelServer
    ) -> None:
        model_server.use(Script([Reply.fail(429), Reply.say("second time lucky")]))
        message = chat_model(model_server, max_retries=1, streaming=True).invoke("hi")

        assert message.content == "second time lucky"
        assert len(model_server.requests) == 2

    def test_a_custom_fault_keeps_its_status_and_message(
        self, model_server: ScriptedModelServer
    ) -> None:
        fault = Fault(400, "context_length_exceeded", "invalid_request_error", "context_length")
        model_server.use(Script([Reply(fault=fault)]))
        with pytest.raises(openai.BadRequestError, match="context_length_exceeded"):
            chat_model(model_server).invoke("hi")

    def test_a_slow_reply_times_the_client_out(self, model_server: ScriptedModelServer) -> None:
        model_server.use(Script([Reply.say("too late", delay_s=5)]))
        started = time.monotonic()
        with pytest.raises(openai.APITimeoutError):
            chat_model(model_server, timeout=0.3).invoke("hi")

        assert time.monotonic() - started < 3

    def test_a_dropped_stream_is_an_error(self, model_server: ScriptedModelServer) -> None:
        model_server.use(Script([Reply.say("one two three four five", drop_after_chunks=3)]))
        with pytest.raises(openai.APIConnectionError):
            stream_all(chat_model(model_server, streaming=True), "hi")

    def test_a_broken_policy_is_reported_and_not_retried(
        self, model_server: ScriptedModelServer
    ) -> None:
        model_server.use(Script([]))
        with pytest.raises(openai.InternalServerError, match="script of 0 steps"):
            chat_model(model_server, max_retries=2).invoke("hi")

        assert len(model_server.requests) == 1
        assert len(model_server.errors) == 1


class TestRecording:
    def test_the_system_prompt_messages_and_bound_tools_are_recorded(
        self, model_server: ScriptedModelServer
    ) -> None:
        @tool
        def get_order_details(order_id: str) -> str:
            """Look up an order by its id, like '#W1234567'."""
            return "{}"

        model_server.use(Script([Reply.call("get_order_details", order_id="#W1234567")]))
        model = chat_model(model_server, streaming=True).bind_tools([get_order_details])
        message = model.invoke([SystemMessage("You are a shop agent."), HumanMessage("where?")])

        assert isinstance(message, AIMessage)
        assert message.tool_calls[0]["name"] == "get_order_details"
        sent = model_server.requests[0]
        assert sent.system_prompt == "You are a shop agent."
        assert sent.last_user_text() == "where?"
        assert sent.tool_names == ["get_order_details"]
        schema = sent.tools[0]["function"]
        assert schema["parameters"]["properties"]["order_id"]["type"] == "string"
        assert sent.model == "gpt-4o-mini"
        assert sent.include_usage

    def test_models_are_listed(self, model_server: ScriptedModelServer) -> None:
        client = openai.OpenAI(base_url=model_server.base_url, api_key="test")
        assert "gpt-4o-mini" in [m.id for m in client.models.list()]


class TestLatency:
    def test_first_token_waits_for_the_time_to_first_token(
        self, model_server: ScriptedModelServer
    ) -> None:
        model_server.use(Script([Reply.say("quick words")]), latency=Latency(ttft_ms=300))
        started = time.monotonic()
        first = next(iter(chat_model(model_server, streaming=True).stream("hi")))

        assert first is not None
        assert time.monotonic() - started >= 0.3

    def test_tokens_per_second_paces_the_stream(self, model_server: ScriptedModelServer) -> None:
        reply = Reply.say("one two three four five six", latency=Latency(tokens_per_s=50))
        model_server.use(Script([reply]))
        started = time.monotonic()
        stream_all(chat_model(model_server, streaming=True), "hi")

        assert time.monotonic() - started >= 6 / 50


class TestScenarios:
    def test_order_lookup_calls_the_tool_then_quotes_its_status(
        self, model_server: ScriptedModelServer
    ) -> None:
        model_server.use(scenarios.order_lookup())
        model = chat_model(model_server, streaming=True)
        history: list[Any] = [HumanMessage(scenarios.ORDER_QUESTION)]

        call = model.invoke(history)
        assert isinstance(call, AIMessage)
        assert call.tool_calls[0]["args"] == {"order_id": scenarios.ORDER_ID}
        result = {"order_id": scenarios.ORDER_ID, "status": "pending", "items": []}
        history += [call, ToolMessage(json.dumps(result), tool_call_id=call.tool_calls[0]["id"])]
        chunks, answer = stream_all(model, history)

        assert f"{scenarios.ORDER_ID} is currently pending" in str(answer.content)
        assert len([c for c in chunks if c.content]) > 3
        assert model_server.requests[1].pending_tool_results()[0].name == "get_order_details"

    async def test_concurrent_customers_each_follow_their_own_script(
        self, model_server: ScriptedModelServer
    ) -> None:
        model_server.use(Router(scenarios.scenario_for))
        model = chat_model(model_server, streaming=True)

        async def customer(n: int) -> str:
            order_id = f"#W{n:07d}"
            history: list[Any] = [HumanMessage(f"where is my order {order_id}")]
            call = await model.ainvoke(history)
            assert isinstance(call, AIMessage)
            assert call.tool_calls[0]["args"] == {"order_id": order_id}
            result = json.dumps({"order_id": order_id, "status": f"status-{n}"})
            history += [call, ToolMessage(result, tool_call_id=call.tool_calls[0]["id"])]
            return str((await model.ainvoke(history)).content)

        answers = await asyncio.gather(*(customer(n) for n in range(20)))

        assert all(f"status-{n}" in answer for n, answer in enumerate(answers))
        assert len(model_server.requests) == 40


class TestServerLifecycle:
    async def test_async_context_manager_serves_and_stops(self) -> None:
        async with ScriptedModelServer(scenarios.greeting(), api_key="sk-right") as server:
            message = await chat_model(server, api_key="sk-right").ainvoke("hi")
            with pytest.raises(openai.AuthenticationError):
                await chat_model(server, api_key="sk-wrong").ainvoke("hi")
            base_url = server.base_url

        assert message.content == scenarios.GREETING_TEXT
        async with httpx.AsyncClient() as client:
            with pytest.raises(httpx.ConnectError):
                await client.get(f"{base_url}/models")
