"""Serve the demo model on a free 127.0.0.1 port for the app's own ChatOpenAI.

It runs on the fakellm engine in a background thread with its own event loop (uvicorn does
not install signal handlers off the main thread, so Ctrl-C still reaches the app's server
first), and stops when the app shuts down: the lifespan enters this after the pools and
leaves it after the last run has finished.
"""

from __future__ import annotations

from collections.abc import AsyncIterator
from contextlib import asynccontextmanager

from app.config import Settings
from app.demo.policy import DemoPolicy
from app.fakellm.server import ScriptedModelServer
from app.fakellm.types import Latency

DEMO_MODEL_NAME = "demo"


def demo_server(settings: Settings) -> ScriptedModelServer:
    return ScriptedModelServer(
        DemoPolicy(),
        latency=Latency(tokens_per_s=settings.demo_model_tokens_per_s or None),
        models=(settings.llm_model, DEMO_MODEL_NAME),
        record=False,  # a long-running server must not keep every request
    )


@asynccontextmanager
async def start_demo_model(settings: Settings) -> AsyncIterator[str]:
    """Yield the base URL ("http://127.0.0.1:PORT/v1") while the demo model serves."""
    async with demo_server(settings) as server:
        yield server.base_url
