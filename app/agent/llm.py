"""The chat model: `ChatOpenAI` against any OpenAI-compatible endpoint."""

from __future__ import annotations

from typing import Any

import httpx2
import openai
from langchain_openai import ChatOpenAI
from pydantic import SecretStr

from app.config import Settings
from app.jsonbytes import json_bytes

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
        return await self._client.post(
            "/chat/completions",
            body=body if content is None else None,
            content=content,
            options=_REQUEST_OPTIONS,
            cast_to=object,
            stream=stream,
            stream_cls=openai.AsyncStream[object],
        )


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
