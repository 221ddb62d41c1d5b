"""Fixtures the LangGraph API tests share (tests/integration/test_lg_*.py). A module that
needs other settings defines its own `server`; `noah` then signs in to that one."""

from __future__ import annotations

from collections.abc import AsyncIterator, Iterator
from typing import Any

import pytest
from langgraph_sdk.client import LangGraphClient
from psycopg_pool import AsyncConnectionPool

from app.config import Settings
from tests.fakellm import ScriptedModelServer
from tests.integration.agent_harness import load_small_shop
from tests.integration.api_harness import LiveServer, live_server
from tests.integration.test_lg_python_sdk import sdk


@pytest.fixture(scope="module")
def server(database_url: str, scripted_model_session: ScriptedModelServer) -> Iterator[LiveServer]:
    """The service with its default settings, for one test module."""
    settings = Settings(database_url=database_url, _env_file=None)  # type: ignore[call-arg]
    with live_server(settings, scripted_model_session) as live:
        yield live


@pytest.fixture
async def noah(server: LiveServer, db: AsyncConnectionPool[Any]) -> AsyncIterator[LangGraphClient]:
    """The official Python SDK signed in as Noah, on the small shop."""
    await load_small_shop(db)
    client = sdk(server)
    yield client
    await client.aclose()
