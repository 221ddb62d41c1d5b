"""Pytest fixtures for the scripted model server.

Use from a conftest or test module with `pytest_plugins = ["tests.fakes.fixtures"]`, or
import the fixtures by name. One server runs per session; `model_server` hands it to each
test with no script, no latency and no recorded requests.
"""

from __future__ import annotations

from collections.abc import Iterator
from typing import Any

import httpx
import pytest
from langchain_openai import ChatOpenAI

from tests.fakellm import ChatRequest, Reply, ScriptedModelServer

MODEL = "gpt-4o-mini"


def unscripted(request: ChatRequest) -> Reply:
    raise AssertionError("no script for the model: call model_server.use(...) first")


def chat_model(server: ScriptedModelServer | str, **options: Any) -> ChatOpenAI:
    """The real client against a server (or a base URL): no retries and usage streamed,
    unless overridden."""
    settings: dict[str, Any] = {
        "model": MODEL,
        "base_url": server if isinstance(server, str) else server.base_url,
        "api_key": "test",
        "max_retries": 0,
        "stream_usage": True,
        "timeout": 10,
    }
    settings.update(options)
    # Its own HTTP client: langchain-openai would otherwise share one per address across
    # the process, and each test server runs on its own event loop.
    settings.setdefault("http_async_client", httpx.AsyncClient(timeout=settings["timeout"]))
    return ChatOpenAI(**settings)


@pytest.fixture(scope="session")
def scripted_model_session() -> Iterator[ScriptedModelServer]:
    with ScriptedModelServer(unscripted) as server:
        yield server


@pytest.fixture
def model_server(scripted_model_session: ScriptedModelServer) -> ScriptedModelServer:
    return scripted_model_session.use(unscripted)
