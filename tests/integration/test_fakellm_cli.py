"""`python -m tests.fakellm` serves a policy that benchmarks can point the app at."""

from __future__ import annotations

import json
import socket
import subprocess
import sys
import time
from collections.abc import Iterator
from pathlib import Path

import httpx
import pytest
from langchain_core.messages import AIMessage, BaseMessage, HumanMessage, ToolMessage

from tests.fakellm.__main__ import engine_for, parse_args
from tests.fakes.fixtures import chat_model

ROOT = Path(__file__).resolve().parents[2]


def free_port() -> int:
    with socket.socket() as sock:
        sock.bind(("127.0.0.1", 0))
        port: int = sock.getsockname()[1]
        return port


def serve(*args: str) -> Iterator[str]:
    port = free_port()
    command = [sys.executable, "-m", "tests.fakellm", "--port", str(port), *args]
    process = subprocess.Popen(command, cwd=ROOT, stdout=subprocess.PIPE, stderr=subprocess.PIPE)
    try:
        deadline = time.monotonic() + 20
        while True:
            try:
                httpx.get(f"http://127.0.0.1:{port}/v1/models").raise_for_status()
                break
            except httpx.TransportError:
                if process.poll() is not None or time.monotonic() > deadline:
                    _, err = process.communicate(timeout=5)
                    pytest.fail(f"fakellm did not start: {err.decode()[-2000:]}")
                time.sleep(0.05)
        yield f"http://127.0.0.1:{port}/v1"
    finally:
        process.terminate()
        process.wait(timeout=10)


@pytest.fixture
def default_cli() -> Iterator[str]:
    yield from serve("--ttft-ms", "50", "--tps", "500")


@pytest.fixture
def customers_cli() -> Iterator[str]:
    yield from serve("--policy", "tests.fakes.scenarios:customers")


class TestCli:
    def test_a_served_model_keeps_no_requests(self) -> None:
        """Benchmarks send the CLI's server tens of thousands of requests; tests record
        theirs through ScriptedModelServer instead."""
        engine = engine_for(parse_args(["--policy", "benchmarks.policy:OrderLookup"]))
        assert engine.record is False

    def test_default_policy_looks_up_the_order_and_answers_its_status(
        self, default_cli: str
    ) -> None:
        model = chat_model(default_cli, streaming=True)
        history: list[BaseMessage] = [HumanMessage("Hi, where is my order #W5918442?")]
        call = model.invoke(history)
        assert isinstance(call, AIMessage)
        assert call.tool_calls[0]["name"] == "get_order_details"
        assert call.tool_calls[0]["args"] == {"order_id": "#W5918442"}

        result = json.dumps({"order_id": "#W5918442", "status": "processed"})
        history += [call, ToolMessage(result, tool_call_id=call.tool_calls[0]["id"])]
        answer = model.invoke(history)

        assert "#W5918442 is currently processed" in str(answer.content)
        assert answer.usage_metadata is not None

    def test_serves_a_policy_named_on_the_command_line(self, customers_cli: str) -> None:
        answer = chat_model(customers_cli).invoke("hello [customer 7]")

        assert answer.content == "Hello! How can I help you today?"
