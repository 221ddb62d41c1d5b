"""Admission (app/runs/admission.py): a worker serving all the turns it can refuses the next
post early, with 503 overloaded and Retry-After, and nothing of the refused turn is kept."""

from __future__ import annotations

import asyncio
import json
from collections.abc import AsyncIterator, Iterator
from typing import Any

import httpx
import pytest
from httpx_sse import aconnect_sse
from psycopg_pool import AsyncConnectionPool

from app.config import Settings
from tests.fakellm import Latency, Reply, Script, ScriptedModelServer
from tests.integration.agent_harness import fetch_one, load_small_shop
from tests.integration.api_harness import LiveServer, live_server

NOAH, MIA = "noah_brown_6181", "mia_garcia_4516"


@pytest.fixture(scope="module")
def server(database_url: str, scripted_model_session: ScriptedModelServer) -> Iterator[LiveServer]:
    """One turn at a time: the smallest worker admission can describe."""
    settings = Settings(database_url=database_url, admit_max_turns=1, _env_file=None)  # type: ignore[call-arg]
    with live_server(settings, scripted_model_session) as live:
        yield live


@pytest.fixture
async def client(
    server: LiveServer, db: AsyncConnectionPool[Any]
) -> AsyncIterator[httpx.AsyncClient]:
    await load_small_shop(db)
    async with server.client() as c:
        yield c


async def test_a_post_past_the_limit_is_refused_at_once_and_leaves_nothing(
    client: httpx.AsyncClient,
    server: LiveServer,
    model_server: ScriptedModelServer,
    db: AsyncConnectionPool[Any],
) -> None:
    slow = Latency(ttft_ms=200, tokens_per_s=40)
    model_server.use(Script([Reply.say("a slow answer " * 8, latency=slow), Reply.say("hi")]))
    started = asyncio.Event()

    async def first() -> str:
        headers = {**server.headers(NOAH), "Accept": "text/event-stream"}
        body = {"content": "hello"}
        async with aconnect_sse(
            client, "POST", "/threads/a1/messages", json=body, headers=headers
        ) as source:
            async for sse in source.aiter_sse():
                started.set()
                if sse.event == "done":
                    return str(json.loads(sse.data)["status"])
        return "no done"

    running = asyncio.create_task(first())
    await asyncio.wait_for(started.wait(), 10)
    refused = await client.post(
        "/threads/a2/messages", json={"content": "me too"}, headers=server.headers(MIA)
    )
    assert refused.status_code == 503
    assert refused.json()["error"]["code"] == "overloaded"
    assert refused.headers["Retry-After"] == "2"
    assert await running == "completed"
    # nothing of the refused post: no thread, no run
    row = await fetch_one(db, "SELECT count(*) AS n FROM runs WHERE thread_id = %s", f"{MIA}:a2")
    assert row["n"] == 0
    missing = await client.get("/threads/a2/state", headers=server.headers(MIA))
    assert missing.status_code == 404
    # the turn ended, the worker admits again; the refusal was counted
    again = await client.post(
        "/threads/a2/messages", json={"content": "me too"}, headers=server.headers(MIA)
    )
    assert again.status_code == 200 and again.json()["status"] == "completed"
    metrics = (await client.get("/metrics")).text
    assert "cs_agent_overloaded_total 1.0" in metrics
