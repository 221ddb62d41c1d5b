"""The app under a real uvicorn server, with the scripted model behind the real ChatOpenAI."""

from __future__ import annotations

import socket
import threading
import time
from collections.abc import Iterator
from contextlib import contextmanager
from typing import Any

import httpx
import uvicorn
from langchain_core.language_models import BaseChatModel

from app.api.auth import issue_token
from app.config import Settings
from app.main import create_app
from app.serving import server_options
from tests.fakellm import ScriptedModelServer
from tests.fakes.fixtures import chat_model


class LiveServer:
    """`create_app(settings, model=...)` under uvicorn, in a background thread.

    `model=None` runs the app's configured model (the demo model when none is set).
    """

    def __init__(self, settings: Settings, model: BaseChatModel | None) -> None:
        self.settings = settings
        self.app = app = create_app(settings, model=model)
        sock = socket.socket(socket.AF_INET, socket.SOCK_STREAM)
        sock.bind(("127.0.0.1", 0))
        self.port = sock.getsockname()[1]
        self._sock = sock
        # As `serve` runs it (X-Forwarded-For, idle connections kept longer than the test
        # clients keep theirs), quieter.
        options = {**server_options(settings), "log_level": "warning"}
        config = uvicorn.Config(app, lifespan="on", access_log=False, **options)
        self._server = uvicorn.Server(config)
        self._thread = threading.Thread(
            target=self._server.run, kwargs={"sockets": [sock]}, daemon=True
        )

    @property
    def url(self) -> str:
        return f"http://127.0.0.1:{self.port}"

    def start(self) -> LiveServer:
        self._thread.start()
        deadline = time.monotonic() + 30
        while not self._server.started:
            if time.monotonic() > deadline or not self._thread.is_alive():
                raise RuntimeError("the app server did not start")
            time.sleep(0.02)
        return self

    def stop(self) -> None:
        self._server.should_exit = True
        self._thread.join(timeout=30)
        self._sock.close()

    def token(self, user_id: str, role: str = "customer", ttl_s: int = 600) -> str:
        secret = self.settings.jwt_secret.get_secret_value()
        return issue_token(secret, user_id, role=role, ttl_s=ttl_s)  # type: ignore[arg-type]

    def headers(self, user_id: str, role: str = "customer", **extra: str) -> dict[str, str]:
        return {"Authorization": f"Bearer {self.token(user_id, role)}", **extra}

    def client(self, **options: Any) -> httpx.AsyncClient:
        return httpx.AsyncClient(base_url=self.url, timeout=30, **options)


@contextmanager
def live_server(settings: Settings, model_server: ScriptedModelServer) -> Iterator[LiveServer]:
    model = chat_model(model_server, streaming=True, timeout=20)
    server = LiveServer(settings, model).start()
    try:
        yield server
    finally:
        server.stop()
