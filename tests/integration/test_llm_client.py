"""`build_chat_model`'s `ChatCompletionsAsDicts`: ChatOpenAI through the SDK's generic `post`.

The shortcut skips two things the typed `chat.completions.create` does: the request
transform and the per-chunk pydantic models. `TestTransformIsTheIdentity` checks that
skipping the transform changes nothing on our payloads; the rest runs the real client
against the scripted model server and checks what the typed method would have given us:
the bearer token, streamed tool calls and text, the client's timeout, its retries, and the
SDK's typed errors.
"""

from __future__ import annotations

import copy
import json
import time
from collections.abc import AsyncIterator
from typing import Annotated, Any, Literal

import httpx2
import openai
import pytest
from langchain_core.language_models import LanguageModelInput
from langchain_core.messages import (
    AIMessage,
    AIMessageChunk,
    BaseMessage,
    HumanMessage,
    SystemMessage,
    ToolMessage,
)
from langchain_core.runnables import Runnable, RunnableBinding
from langchain_core.tools import BaseTool, tool
from langchain_openai import ChatOpenAI
from openai._utils._json import openapi_dumps
from openai._utils._transform import PropertyInfo, async_transform
from openai.types.chat import completion_create_params
from psycopg_pool import AsyncConnectionPool
from pydantic import BaseModel, Field, SecretStr
from typing_extensions import TypedDict

from app.agent.llm import ChatCompletionsAsDicts, build_chat_model, model_http_client
from app.config import Settings
from app.jsonbytes import json_bytes
from app.tools.registry import build_tools
from tests.fakellm import ChatRequest, Latency, Reply, Script, ScriptedModelServer, ToolCall

API_KEY = "sk-test-llm-client-key"
ORDER_ID = "#W1234567"

# What the typed `create` takes as request options rather than body fields. In a payload
# they would reach the wire as literal JSON keys through `ChatCompletionsAsDicts`.
REQUEST_OPTION_KEYS = {"extra_body", "extra_headers", "extra_query", "timeout"}


# Tools with the argument shapes the real ones do not have: nested objects, optionals,
# enums, lists, dicts, numbers with bounds.
class Address(BaseModel):
    street: str
    city: str
    zip: str = Field(pattern=r"^\d{5}$")
    unit: str | None = None


class Item(BaseModel):
    item_id: str
    quantity: int = Field(default=1, ge=1, le=10)
    options: dict[str, str] = Field(default_factory=dict)


@tool
def ship_items(
    items: list[Item],
    to: Address,
    speed: Literal["standard", "express", "overnight"] = "standard",
    gift_note: str | None = None,
    tags: list[str] | None = None,
) -> str:
    """Ship items to an address."""
    return "{}"


@tool
def rate_order(order_id: str, stars: int, comment: str = "", ratio: float = 0.5) -> str:
    """Rate an order from 1 to 5 stars."""
    return "{}"


def closed_pool() -> AsyncConnectionPool[Any]:
    return AsyncConnectionPool("postgresql://nowhere.invalid/x", open=False)


def service_tools() -> list[BaseTool]:
    """Every tool the agent binds (their schemas need no database), plus the odd shapes."""
    return [*build_tools(closed_pool()).all, ship_items, rate_order]


def conversation() -> list[BaseMessage]:
    """Every kind of message the agent sends: system, human (plain, named, in parts), AI
    with text and parallel tool calls, tool results (one an error), AI text."""
    return [
        SystemMessage("You are the shop's assistant."),
        HumanMessage("Where is my order #W1234567, and ship the rest to me."),
        AIMessage(
            "Let me look that up.",
            tool_calls=[
                {"name": "get_order_details", "args": {"order_id": ORDER_ID}, "id": "call_1"},
                {
                    "name": "ship_items",
                    "args": {
                        "items": [{"item_id": "1", "quantity": 2, "options": {"size": "M"}}],
                        "to": {"street": "1 Main St", "city": "Austin", "zip": "78701"},
                        "speed": "express",
                        "gift_note": None,
                        "tags": ["gift", "fragile"],
                    },
                    "id": "call_2",
                },
            ],
            usage_metadata={"input_tokens": 10, "output_tokens": 5, "total_tokens": 15},
            response_metadata={"finish_reason": "tool_calls", "model_name": "gpt-4o-mini"},
        ),
        ToolMessage(
            json.dumps({"order_id": ORDER_ID, "status": "pending", "total": 12.5}),
            tool_call_id="call_1",
        ),
        ToolMessage(
            "Error: the address is outside our area", tool_call_id="call_2", status="error"
        ),
        AIMessage("Your order is pending; I could not ship to that address."),
        HumanMessage('Thanks. 谢谢! Émoji 🙂 and "quotes" \\ too.', name="sara"),
        HumanMessage(
            content=[
                {"type": "text", "text": "Here is a photo of the box."},
                {"type": "image_url", "image_url": {"url": "https://example.com/box.png"}},
            ]
        ),
    ]


@pytest.fixture(params=["aiohttp", "httpx"])
async def http_client(
    request: pytest.FixtureRequest, settings: Settings
) -> AsyncIterator[httpx2.AsyncClient]:
    """The service's own model HTTP client, on each of its two stacks. A long timeout of
    its own: only the model's `llm_timeout_s` may time a request out."""
    stack = settings.model_copy(update={"llm_http_client": request.param, "llm_timeout_s": 60.0})
    async with model_http_client(stack) as client:
        yield client


def configured(settings: Settings, base_url: str, **changes: Any) -> Settings:
    update: dict[str, Any] = {
        "openai_api_key": SecretStr(API_KEY),
        "openai_base_url": base_url,
        "llm_max_retries": 2,
        "llm_timeout_s": 10.0,
        **changes,
    }
    return settings.model_copy(update=update)


def agent_model(
    settings: Settings,
    server: ScriptedModelServer,
    http_client: httpx2.AsyncClient,
    **changes: Any,
) -> ChatOpenAI:
    return build_chat_model(
        configured(settings, server.base_url, **changes), http_client=http_client
    )


def bound_kwargs(bound: Runnable[Any, Any]) -> dict[str, Any]:
    """What `bind_tools` bound: the tools, tool choice and so on."""
    assert isinstance(bound, RunnableBinding)
    return dict(bound.kwargs)


def streamed_payload(
    model: ChatOpenAI, bound: Runnable[Any, Any], messages: list[BaseMessage]
) -> dict[str, Any]:
    """The body ChatOpenAI's streaming path builds for these messages."""
    return model._get_request_payload(
        messages, stream=True, stream_options={"include_usage": True}, **bound_kwargs(bound)
    )


class TestHttpStack:
    def test_the_service_calls_the_model_over_aiohttp_unless_told_httpx(
        self, settings: Settings
    ) -> None:
        assert Settings.model_fields["llm_http_client"].default == "aiohttp"
        stacks = {
            name: model_http_client(settings.model_copy(update={"llm_http_client": name}))
            for name in ("aiohttp", "httpx")
        }
        assert isinstance(stacks["aiohttp"], openai.DefaultAioHttpClient)
        assert not isinstance(stacks["httpx"], openai.DefaultAioHttpClient)
        assert isinstance(stacks["httpx"], openai.DefaultAsyncHttpxClient)


class TestTransformIsTheIdentity:
    """The guard for `ChatCompletionsAsDicts` skipping the SDK's request transform.

    The typed `chat.completions.create` passes the body through `async_transform` against
    `CompletionCreateParams*` (key aliases, date and base64 formats, dropping omitted
    values); `ChatCompletionsAsDicts` posts ChatOpenAI's payload as it is. That is safe only
    while the transform leaves our payloads unchanged. If one of these tests fails after an
    openai SDK upgrade, the shortcut now sends something different from what the SDK would:
    fix `app/agent/llm.py` (or go back to `chat.completions.create`) before upgrading.
    """

    @pytest.mark.parametrize(
        "bind_options",
        [
            {},
            {"tool_choice": "required"},
            {"tool_choice": "get_order_details", "parallel_tool_calls": False},
            {"strict": True, "tool_choice": "auto"},
        ],
        ids=["plain", "required", "named-choice", "strict"],
    )
    async def test_streaming_payload_with_every_tool_and_message_kind(
        self, settings: Settings, bind_options: dict[str, Any]
    ) -> None:
        model = build_chat_model(settings.model_copy(update={"openai_api_key": SecretStr(API_KEY)}))
        tools = service_tools()
        bound = model.bind_tools(tools, **bind_options)
        payload = streamed_payload(model, bound, conversation())
        assert payload["stream"] is True
        assert len(payload["tools"]) == len(tools) > 15
        assert {m["role"] for m in payload["messages"]} == {"system", "user", "assistant", "tool"}
        original = copy.deepcopy(payload)

        sent = await async_transform(
            payload, completion_create_params.CompletionCreateParamsStreaming
        )

        assert sent == original
        # Equal values of another type (0 and 0.0, a tuple for a list) would compare equal
        # above but not on the wire.
        assert json.dumps(sent) == json.dumps(original)
        assert payload == original  # and it was left alone

    async def test_non_streaming_payload(self, settings: Settings) -> None:
        model = build_chat_model(settings.model_copy(update={"openai_api_key": SecretStr(API_KEY)}))
        bound = model.bind_tools(service_tools(), tool_choice="any")
        payload = model._get_request_payload(conversation(), stream=False, **bound_kwargs(bound))
        assert payload["stream"] is False
        original = copy.deepcopy(payload)

        sent = await async_transform(
            payload, completion_create_params.CompletionCreateParamsNonStreaming
        )

        assert sent == original
        assert json.dumps(sent) == json.dumps(original)

    async def test_the_payload_carries_no_request_options(self, settings: Settings) -> None:
        """The typed `create` lifts these out of the body; the dict client hands any request
        carrying them to the typed method. The service's own requests carry none, so they all
        take the shortcut."""
        model = build_chat_model(settings)
        payload = streamed_payload(model, model.bind_tools(service_tools()), conversation())

        assert not REQUEST_OPTION_KEYS & payload.keys()
        assert model.async_client.__class__ is ChatCompletionsAsDicts

    async def test_the_transform_would_show_a_rewrite(self) -> None:
        """The comparison above can fail: the transform does rewrite aliased keys."""

        class Aliased(TypedDict, total=False):
            max_tokens: Annotated[int, PropertyInfo(alias="maxTokens")]

        assert await async_transform({"max_tokens": 5}, Aliased) == {"maxTokens": 5}


class TestEncodedBody:
    """`ChatCompletionsAsDicts` hands the SDK the body already encoded (orjson); the SDK
    sends bytes as they are. They must decode to what the SDK's own encoder would send."""

    @pytest.mark.parametrize("stream", [True, False])
    async def test_the_bytes_say_what_the_sdk_would_have_sent(
        self, settings: Settings, stream: bool
    ) -> None:
        model = build_chat_model(settings)
        bound = model.bind_tools(service_tools(), tool_choice="auto")
        payload = model._get_request_payload(conversation(), stream=stream, **bound_kwargs(bound))

        body = json_bytes(payload)

        assert isinstance(body, bytes)
        assert json.loads(body) == json.loads(openapi_dumps(payload))
        assert "谢谢! Émoji 🙂".encode() in body  # UTF-8, not \u escapes, as the SDK sends

    def test_a_body_orjson_cannot_encode_is_left_to_the_sdk(self) -> None:
        with_model = {"model": "m", "metadata": Address(street="s", city="c", zip="12345")}
        with_int_key = {"model": "m", "logit_bias": {50256: -100}}

        assert json_bytes(with_model) is None
        assert json_bytes(with_int_key) is None
        assert json.loads(openapi_dumps(with_int_key))["logit_bias"] == {"50256": -100}


def order_and_shipping_calls(text: str = "Checking both.") -> Reply:
    return Reply.calls(
        ToolCall("get_order_details", {"order_id": ORDER_ID}),
        ToolCall("calc_shipping", {"distance_km": 300, "weight_kg": 2.5}),
        text=text,
    )


EXPECTED_CALLS = [
    ("get_order_details", {"order_id": ORDER_ID}),
    ("calc_shipping", {"distance_km": 300, "weight_kg": 2.5}),
]


def always(reply: Reply) -> Any:
    def policy(request: ChatRequest) -> Reply:
        return reply

    return policy


class TestStreaming:
    async def test_ainvoke_streams_text_and_tool_calls_with_the_bearer_token(
        self,
        settings: Settings,
        model_server: ScriptedModelServer,
        http_client: httpx2.AsyncClient,
    ) -> None:
        model_server.use(Script([order_and_shipping_calls()]))
        model = agent_model(settings, model_server, http_client)
        bound = model.bind_tools(service_tools())
        messages = [SystemMessage("You are the shop's assistant."), HumanMessage("where?")]

        message = await bound.ainvoke(messages)

        assert isinstance(message, AIMessage)
        assert message.content == "Checking both."
        assert [(c["name"], c["args"]) for c in message.tool_calls] == EXPECTED_CALLS
        assert len({c["id"] for c in message.tool_calls}) == 2
        assert message.invalid_tool_calls == []
        assert message.response_metadata["finish_reason"] == "tool_calls"
        assert message.usage_metadata is not None
        assert message.usage_metadata["input_tokens"] > 0
        [sent] = model_server.requests
        assert sent.headers["authorization"] == f"Bearer {API_KEY}"
        assert sent.headers["content-type"] == "application/json"
        assert sent.headers["x-stainless-retry-count"] == "0"
        assert sent.stream is True
        assert sent.include_usage is True
        # Exactly ChatOpenAI's payload went over the wire.
        assert sent.body == streamed_payload(model, bound, messages)

    async def test_astream_splits_arguments_and_text_into_chunks(
        self,
        settings: Settings,
        model_server: ScriptedModelServer,
        http_client: httpx2.AsyncClient,
    ) -> None:
        answer = f"Order {ORDER_ID} is pending and shipping costs 12.50."
        first = order_and_shipping_calls("Let me check that for you.")
        model_server.use(Script([first, Reply.say(answer)]))
        bound = agent_model(settings, model_server, http_client).bind_tools(service_tools())
        history: list[BaseMessage] = [HumanMessage("where is my order and what is shipping?")]

        streamed = [c async for c in bound.astream(history)]
        chunks = [c for c in streamed if isinstance(c, AIMessageChunk)]
        assert len(chunks) == len(streamed)
        call = sum(chunks[1:], chunks[0])

        assert len([c for c in chunks if c.content]) > 3
        pieces = [tc["args"] for c in chunks for tc in c.tool_call_chunks if tc["args"]]
        assert len(pieces) > 4
        assert isinstance(call, AIMessageChunk)
        assert call.content == "Let me check that for you."
        assert [(c["name"], c["args"]) for c in call.tool_calls] == EXPECTED_CALLS
        assert call.usage_metadata is not None

        history += [
            AIMessage(content=call.content, tool_calls=call.tool_calls),
            *(
                ToolMessage(json.dumps({"ok": True, "n": n}), tool_call_id=c["id"])
                for n, c in enumerate(call.tool_calls)
            ),
        ]
        streamed = [c async for c in bound.astream(history)]
        chunks = [c for c in streamed if isinstance(c, AIMessageChunk)]
        assert len(chunks) == len(streamed)

        assert "".join(str(c.content) for c in chunks) == answer
        assert len([c for c in chunks if c.content]) > 3
        assert not any(c.tool_call_chunks for c in chunks)
        second = model_server.requests[1]
        assert [r.name for r in second.pending_tool_results()] == [
            "get_order_details",
            "calc_shipping",
        ]
        assert second.headers["authorization"] == f"Bearer {API_KEY}"

    async def test_the_client_yields_plain_dict_chunks(
        self,
        settings: Settings,
        model_server: ScriptedModelServer,
        http_client: httpx2.AsyncClient,
    ) -> None:
        model_server.use(Script([order_and_shipping_calls()]))
        model = agent_model(settings, model_server, http_client)
        payload = streamed_payload(model, model.bind_tools(service_tools()), conversation())

        stream = await model.async_client.create(**payload)
        assert isinstance(stream, openai.AsyncStream)
        async with stream:
            chunks = [chunk async for chunk in stream]

        assert chunks
        assert all(type(chunk) is dict for chunk in chunks)
        assert chunks[0]["object"] == "chat.completion.chunk"
        assert chunks[-1]["choices"] == []
        assert chunks[-1]["usage"]["total_tokens"] > 0
        names = [
            call["function"]["name"]
            for chunk in chunks
            for choice in chunk["choices"]
            for call in choice["delta"].get("tool_calls") or []
            if call["function"].get("name")
        ]
        assert names == ["get_order_details", "calc_shipping"]


class TestNonStreaming:
    async def test_create_without_stream_returns_the_completion_as_a_dict(
        self,
        settings: Settings,
        model_server: ScriptedModelServer,
        http_client: httpx2.AsyncClient,
    ) -> None:
        model_server.use(Script([order_and_shipping_calls()]))
        model = agent_model(settings, model_server, http_client)
        bound = model.bind_tools(service_tools())
        payload = model._get_request_payload(conversation(), stream=False, **bound_kwargs(bound))

        completion = await model.async_client.create(**payload)

        assert type(completion) is dict
        assert completion["object"] == "chat.completion"
        choice = completion["choices"][0]
        assert choice["finish_reason"] == "tool_calls"
        assert choice["message"]["content"] == "Checking both."
        calls = [
            (c["function"]["name"], json.loads(c["function"]["arguments"]))
            for c in choice["message"]["tool_calls"]
        ]
        assert calls == EXPECTED_CALLS
        assert completion["usage"]["total_tokens"] > 0
        [sent] = model_server.requests
        assert sent.stream is False
        assert sent.headers["authorization"] == f"Bearer {API_KEY}"
        assert sent.body == payload

    async def test_a_request_with_per_call_options_takes_the_typed_method(
        self,
        settings: Settings,
        model_server: ScriptedModelServer,
        http_client: httpx2.AsyncClient,
    ) -> None:
        """`extra_body` and `extra_headers` are request options of the typed method: sent
        through it, the extra field joins the body and the header the request, instead of
        going out as JSON fields named `extra_body` and `extra_headers`."""
        model_server.use(Script([order_and_shipping_calls()]))
        model = agent_model(settings, model_server, http_client)
        payload = model._get_request_payload([HumanMessage("where?")], stream=False)

        completion = await model.async_client.create(
            **payload, extra_body={"seed_hint": 7}, extra_headers={"X-Shop": "demo"}
        )

        assert completion.choices[0].message.content == "Checking both."
        [sent] = model_server.requests
        assert sent.body["seed_hint"] == 7
        assert "extra_body" not in sent.body and "extra_headers" not in sent.body
        assert sent.headers["x-shop"] == "demo"
        assert sent.headers["authorization"] == f"Bearer {API_KEY}"

    async def test_chatopenai_with_streaming_off_reads_the_dict_completion(
        self,
        settings: Settings,
        model_server: ScriptedModelServer,
        http_client: httpx2.AsyncClient,
    ) -> None:
        model_server.use(Script([order_and_shipping_calls()]))
        bound = agent_model(settings, model_server, http_client).bind_tools(service_tools())

        message = await bound.ainvoke([HumanMessage("where?")], stream=False)

        assert isinstance(message, AIMessage)
        assert message.content == "Checking both."
        assert [(c["name"], c["args"]) for c in message.tool_calls] == EXPECTED_CALLS
        assert model_server.requests[0].stream is False


async def call_streaming(model: ChatOpenAI) -> Any:
    bound: Runnable[LanguageModelInput, BaseMessage] = model.bind_tools(service_tools())
    return await bound.ainvoke([HumanMessage("where?")])


async def call_non_streaming(model: ChatOpenAI) -> Any:
    payload = model._get_request_payload([HumanMessage("where?")], stream=False)
    return await model.async_client.create(**payload)


CALLS = pytest.mark.parametrize(
    "call", [call_streaming, call_non_streaming], ids=["chatopenai-stream", "create-non-stream"]
)


class TestErrors:
    @CALLS
    async def test_a_server_error_is_retried_then_raised_as_the_sdks_error(
        self,
        settings: Settings,
        model_server: ScriptedModelServer,
        http_client: httpx2.AsyncClient,
        call: Any,
    ) -> None:
        model_server.use(always(Reply.fail(500)))
        model = agent_model(settings, model_server, http_client, llm_max_retries=2)

        with pytest.raises(openai.InternalServerError) as caught:
            await call(model)

        assert isinstance(caught.value, openai.APIStatusError)
        assert caught.value.status_code == 500
        assert model_server.errors == []
        assert len(model_server.requests) == 2 + 1
        retry_counts = [r.headers["x-stainless-retry-count"] for r in model_server.requests]
        assert retry_counts == ["0", "1", "2"]
        assert all(r.headers["authorization"] == f"Bearer {API_KEY}" for r in model_server.requests)

    async def test_no_retries_when_the_setting_is_zero(
        self,
        settings: Settings,
        model_server: ScriptedModelServer,
        http_client: httpx2.AsyncClient,
    ) -> None:
        model_server.use(always(Reply.fail(503)))
        model = agent_model(settings, model_server, http_client, llm_max_retries=0)

        with pytest.raises(openai.InternalServerError):
            await call_streaming(model)

        assert len(model_server.requests) == 1

    async def test_a_retried_server_error_then_success_answers(
        self,
        settings: Settings,
        model_server: ScriptedModelServer,
        http_client: httpx2.AsyncClient,
    ) -> None:
        model_server.use(Script([Reply.fail(502), order_and_shipping_calls()]))
        model = agent_model(settings, model_server, http_client)

        message = await call_streaming(model)

        assert [(c["name"], c["args"]) for c in message.tool_calls] == EXPECTED_CALLS
        assert len(model_server.requests) == 2

    @CALLS
    async def test_a_bad_request_is_raised_without_retry(
        self,
        settings: Settings,
        model_server: ScriptedModelServer,
        http_client: httpx2.AsyncClient,
        call: Any,
    ) -> None:
        model_server.use(always(Reply.fail(400)))
        model = agent_model(settings, model_server, http_client, llm_max_retries=3)

        with pytest.raises(openai.BadRequestError, match="fakellm: HTTP 400") as caught:
            await call(model)

        assert caught.value.status_code == 400
        assert caught.value.body is not None
        assert len(model_server.requests) == 1

    async def test_the_configured_key_is_the_one_a_checking_server_accepts(
        self, settings: Settings, http_client: httpx2.AsyncClient
    ) -> None:
        async with ScriptedModelServer(always(Reply.say("welcome")), api_key=API_KEY) as server:
            right = build_chat_model(configured(settings, server.base_url), http_client=http_client)
            message = await right.ainvoke([HumanMessage("hi")])
            wrong = build_chat_model(
                configured(settings, server.base_url, openai_api_key=SecretStr("sk-wrong")),
                http_client=http_client,
            )
            with pytest.raises(openai.AuthenticationError) as caught:
                await wrong.ainvoke([HumanMessage("hi")])

        assert message.content == "welcome"
        assert caught.value.status_code == 401
        assert len(server.requests) == 1  # the refused request never reached the policy

    @pytest.mark.parametrize(
        "reply",
        [
            pytest.param(Reply.say("too late", delay_s=5), id="before-any-byte"),
            # The first chunk comes at once, the next only after 5 s: the read timeout, not
            # langchain's own per-chunk timer (disabled), must end the call.
            pytest.param(
                Reply.say("the first word and then silence", latency=Latency(0, 0.2)),
                id="midway",
            ),
        ],
    )
    async def test_the_configured_timeout_applies(
        self,
        settings: Settings,
        model_server: ScriptedModelServer,
        http_client: httpx2.AsyncClient,
        reply: Reply,
    ) -> None:
        model_server.use(always(reply))
        model = agent_model(
            settings, model_server, http_client, llm_timeout_s=0.3, llm_max_retries=0
        )
        started = time.monotonic()

        with pytest.raises(openai.APITimeoutError):
            await call_streaming(model)

        assert time.monotonic() - started < 3
        assert len(model_server.requests) == 1
        assert model.stream_chunk_timeout is None
