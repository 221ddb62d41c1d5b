"""The chat model: `ChatOpenAI` against any OpenAI-compatible endpoint."""

from __future__ import annotations

import httpx
from langchain_openai import ChatOpenAI
from pydantic import SecretStr

from app.config import Settings


def build_chat_model(
    settings: Settings, *, base_url: str | None = None, http_client: httpx.AsyncClient | None = None
) -> ChatOpenAI:
    """`base_url` overrides the setting (the demo model passes its own address).

    The openai SDK retries 429 and 5xx with exponential backoff `llm_max_retries` times.
    Pass the lifespan's own `http_client`: langchain-openai otherwise shares one cached client
    per address across the process, and an httpx client must not outlive its event loop.
    """
    api_key = settings.openai_api_key or SecretStr("not-needed")
    return ChatOpenAI(
        model=settings.llm_model,
        base_url=base_url or settings.openai_base_url,
        api_key=api_key,
        timeout=settings.llm_timeout_s,
        max_retries=settings.llm_max_retries,
        streaming=True,
        stream_usage=True,
        temperature=0,
        http_async_client=http_client,
    )
