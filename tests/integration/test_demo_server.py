"""`start_demo_model`: a local OpenAI-compatible endpoint for the real ChatOpenAI."""

from __future__ import annotations

import re

import httpx
import pytest
from langchain_core.messages import HumanMessage, SystemMessage

from app.agent.llm import build_chat_model
from app.config import Settings
from app.demo import server as demo
from app.demo.server import start_demo_model
from app.fakellm import ScriptedModelServer


def settings(**values: object) -> Settings:
    return Settings(_env_file=None, llm_provider="demo", **values)  # type: ignore[arg-type]


class TestStartDemoModel:
    async def test_serves_on_a_local_port_and_streams_word_by_word(self) -> None:
        config = settings(demo_model_tokens_per_s=0)
        async with start_demo_model(config) as base_url:
            assert re.fullmatch(r"http://127\.0\.0\.1:\d+/v1", base_url)
            model = build_chat_model(config, base_url=base_url)
            chunks = [c async for c in model.astream([HumanMessage("hello")])]
            assert "".join(str(c.content) for c in chunks).startswith("Hi! I'm the shop's")
            assert len([c for c in chunks if c.content]) > 20

    async def test_chinese_streams_character_by_character(self) -> None:
        config = settings(demo_model_tokens_per_s=0)
        async with start_demo_model(config) as base_url:
            model = build_chat_model(config, base_url=base_url)
            pieces = [str(c.content) async for c in model.astream("你好") if c.content]
            assert pieces[:3] == ["您", "好", "！"]

    async def test_keeps_no_requests(self, monkeypatch: pytest.MonkeyPatch) -> None:
        servers = []
        original = demo.demo_server

        def spy(config: Settings) -> ScriptedModelServer:
            servers.append(original(config))
            return servers[-1]

        monkeypatch.setattr(demo, "demo_server", spy)
        config = settings(demo_model_tokens_per_s=0)
        async with start_demo_model(config) as base_url:
            model = build_chat_model(config, base_url=base_url)
            for _ in range(3):
                await model.ainvoke([SystemMessage("x"), HumanMessage("hi")])
            assert servers[0].requests == [] and servers[0].errors == []

    async def test_stops_listening_on_exit(self) -> None:
        async with start_demo_model(settings()) as base_url, httpx.AsyncClient() as client:
            assert (await client.get(f"{base_url}/models")).status_code == 200
        async with httpx.AsyncClient() as client:
            with pytest.raises(httpx.ConnectError):
                await client.get(f"{base_url}/models")
