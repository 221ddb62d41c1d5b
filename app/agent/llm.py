"""The chat model: `ChatOpenAI` against any OpenAI-compatible endpoint."""

from __future__ import annotations

import asyncio
from collections.abc import AsyncIterator
from contextlib import asynccontextmanager
from typing import Any

import httpx2
import openai
from langchain_core.messages import BaseMessage
from langchain_openai import ChatOpenAI
from pydantic import SecretStr

from app.agent.sse_decoder import EventStreamDecoder
from app.config import Settings
from app.jsonbytes import json_bytes


class ModelCallTimeout(openai.APITimeoutError):
    """A whole model call (connect, retries, first byte, the stream to its end) took longer
    than `llm_call_deadline_s`."""

    def __init__(self, deadline_s: float) -> None:
        message = f"the model call passed its deadline of {deadline_s:g} s"
        openai.APIConnectionError.__init__(self, message=message, request=_model_request())
        self.deadline_s = deadline_s


class ModelReplyBroken(openai.APIError):
    """The model's reply ended without a `finish_reason`: cut off before its end, or not a
    chat completion at all."""

    def __init__(self, reason: str, request: httpx2.Request | None = None) -> None:
        message = f"the model's reply is unusable: {reason}"
        super().__init__(message, request or _model_request(), body=None)


def _model_request() -> httpx2.Request:
    # The SDK's errors carry the request; these two are raised above the HTTP client.
    return httpx2.Request("POST", "/chat/completions")


@asynccontextmanager
async def model_call_deadline(deadline_s: float) -> AsyncIterator[None]:
    """Bound one whole model call, raising `ModelCallTimeout` when it runs out.

    The client's timeout (`llm_timeout_s`) bounds only each wait for bytes: a server that
    sends one chunk and then a keepalive comment every second held a turn for ten minutes.
    One timer for the call, not one per chunk: the per-chunk cost is what the streaming
    path was profiled for.
    """
    timeout = asyncio.timeout(deadline_s)
    try:
        async with timeout:
            yield
    except TimeoutError as error:
        if not timeout.expired():
            raise
        raise ModelCallTimeout(deadline_s) from error


def require_finished(message: BaseMessage) -> BaseMessage:
    """The model's reply, if the model ended it: a chat completion always carries a
    `finish_reason`, in its last choice chunk when streamed. Without one, the stream was
    cut off (by the server, a proxy or the network), or the body was no chat completion;
    what arrived would otherwise be stored as a whole answer (half a sentence, or none)."""
    if not message.response_metadata.get("finish_reason"):
        raise ModelReplyBroken("it ended without a finish_reason")
    return message


# What the SDK's own `chat.completions.create` sends with each request: the bearer token.
_REQUEST_OPTIONS: Any = {"security": {"bearer_auth": True}}
# Arguments of the typed method that are request options, not body fields.
_OPTION_ARGS = frozenset({"extra_body", "extra_headers", "extra_query", "timeout"})


class ChatCompletionsAsDicts:
    """`chat.completions.create` for ChatOpenAI, minus two costs of the typed SDK method.

    The typed method walks the whole request (every message, every tool schema, each
    union member) through the SDK's key-alias transform, and builds a pydantic model for
    every streamed chunk that ChatOpenAI immediately dumps back to a dict. Profiled under
    load, the two were about a third of the CPU of a turn. ChatOpenAI already sends plain
    JSON (no aliased keys, no dates or files for the transform to rewrite: a unit test
    checks this) and accepts dict chunks, so the request goes through the client's
    documented generic `post`, with the same retries, timeouts, auth and typed errors.
    A request carrying per-call options, and the raw-response variant ChatOpenAI uses for
    response headers and non-streaming calls, take the typed method.
    """

    def __init__(self, client: openai.AsyncOpenAI) -> None:
        self._client = client
        self._typed = client.chat.completions
        self.with_raw_response = self._typed.with_raw_response

    async def create(self, **body: Any) -> Any:
        if not _OPTION_ARGS.isdisjoint(body):
            return await self._typed.create(**body)
        stream = bool(body.get("stream"))
        # The SDK would encode the body with `json` on every call; most of it is the ~16 kB
        # of tool schemas (~0.2 ms a call under load). A body orjson refuses (a pydantic
        # model in it) is left to the SDK.
        content = json_bytes(body)
        response = await self._client.post(
            "/chat/completions",
            body=body if content is None else None,
            content=content,
            options=_REQUEST_OPTIONS,
            cast_to=object,
            stream=stream,
            stream_cls=openai.AsyncStream[object],
        )
        if isinstance(response, openai.AsyncStream):
            await _require_event_stream(response)
            # read lazily, at the stream's first chunk (tests/unit/test_sse_decoder.py)
            response._decoder = EventStreamDecoder()
        return response


async def _require_event_stream(stream: openai.AsyncStream[Any]) -> None:
    """A body that is no event stream (one JSON object from a server that ignored `stream`)
    reads as a stream of no events: an empty answer, or langchain's bare ValueError. The
    SDK checks a plain reply's content type the same way."""
    content_type = stream.response.headers.get("content-type", "")
    if not content_type.startswith("text/event-stream"):
        await stream.close()
        reason = f"a stream was asked for, {content_type or 'no content type'} came back"
        raise ModelReplyBroken(reason, stream.response.request)


def model_http_client(settings: Settings) -> httpx2.AsyncClient:
    """The HTTP client under the openai SDK, one per process lifetime.

    aiohttp is the SDK's documented alternative transport: it parses the streamed response
    in C, where httpx (the default) does it in pure Python. Under load that was ~14% of a
    turn's CPU. Timeouts, retries and the SDK's typed errors are the same with both.
    """
    limits = httpx2.Limits(max_connections=None, max_keepalive_connections=100)
    if settings.llm_http_client == "aiohttp":
        return openai.DefaultAioHttpClient(timeout=settings.llm_timeout_s, limits=limits)
    return openai.DefaultAsyncHttpxClient(timeout=settings.llm_timeout_s, limits=limits)


def build_chat_model(
    settings: Settings,
    *,
    base_url: str | None = None,
    http_client: httpx2.AsyncClient | None = None,
) -> ChatOpenAI:
    """`base_url` overrides the setting (the demo model passes its own address).

    The openai SDK retries 429 and 5xx with exponential backoff `llm_max_retries` times.
    `llm_timeout_s` bounds each wait for bytes: the first and every later one of a stream.
    The callers bound the whole call (`model_call_deadline`) and check that the reply was
    finished (`require_finished`).
    Pass the lifespan's own `http_client` (`model_http_client`): langchain-openai otherwise
    shares one cached client per address across the process, and an HTTP client must not
    outlive its event loop.
    """
    api_key = settings.openai_api_key or SecretStr("not-needed")
    model = ChatOpenAI(
        model=settings.llm_model,
        base_url=base_url or settings.openai_base_url,
        api_key=api_key,
        timeout=settings.llm_timeout_s,
        max_retries=settings.llm_max_retries,
        streaming=True,
        stream_usage=True,
        temperature=0,
        http_async_client=http_client,
        # The HTTP read timeout (`llm_timeout_s`) already ends a stream that goes silent;
        # langchain's own per-chunk timer would wrap every chunk in `asyncio.wait_for`.
        stream_chunk_timeout=None,
    )
    model.async_client = ChatCompletionsAsDicts(model.root_async_client)
    return model
