"""Run a `ModelEngine` under uvicorn on a free localhost port, in a background thread."""

from __future__ import annotations

import asyncio
import socket
import threading
import time
from collections.abc import Sequence
from types import TracebackType

import uvicorn

from tests.fakellm.engine import DEFAULT_MODELS, ModelEngine
from tests.fakellm.types import ChatRequest, Latency, Policy

STARTUP_TIMEOUT_S = 10.0


class ScriptedModelServer:
    """An OpenAI-compatible endpoint for `ChatOpenAI(base_url=server.base_url, api_key="test")`.

    Usable as a sync or async context manager. The thread has its own event loop, so both
    sync and async clients in the test can talk to it.
    """

    def __init__(
        self,
        policy: Policy,
        *,
        latency: Latency | None = None,
        api_key: str | None = None,
        models: Sequence[str] = DEFAULT_MODELS,
        host: str = "127.0.0.1",
        port: int = 0,
        record: bool = True,
    ) -> None:
        self.engine = ModelEngine(
            policy, latency=latency, api_key=api_key, models=models, record=record
        )
        self._host = host
        self._port = port
        self._server: uvicorn.Server | None = None
        self._thread: threading.Thread | None = None
        self.port: int | None = None

    @property
    def base_url(self) -> str:
        if self.port is None:
            raise RuntimeError("the server is not running")
        return f"http://{self._host}:{self.port}/v1"

    @property
    def policy(self) -> Policy:
        return self.engine.policy

    @policy.setter
    def policy(self, policy: Policy) -> None:
        self.engine.policy = policy

    @property
    def requests(self) -> list[ChatRequest]:
        return self.engine.requests

    @property
    def errors(self) -> list[BaseException]:
        return self.engine.errors

    def use(self, policy: Policy, *, latency: Latency | None = None) -> ScriptedModelServer:
        """Switch policy, forget earlier requests and errors, and set the latency (default:
        the constructor's). For a server shared between tests."""
        self.engine.reset(policy, latency=latency)
        return self

    def start(self) -> ScriptedModelServer:
        if self._thread is not None:
            raise RuntimeError("the server is already running")
        sock = socket.socket(socket.AF_INET, socket.SOCK_STREAM)
        sock.setsockopt(socket.SOL_SOCKET, socket.SO_REUSEADDR, 1)
        sock.bind((self._host, self._port))
        self.port = sock.getsockname()[1]
        config = uvicorn.Config(
            self.engine.asgi_app(),
            log_level="warning",
            access_log=False,
            lifespan="off",
            timeout_graceful_shutdown=1,
            # Longer than the client's idle expiry (httpx: 5 s, uvicorn's default here too),
            # so the client always drops an idle connection first: with equal timeouts a
            # request sent on a connection the server is closing fails, and the tests'
            # clients do not retry (CI saw a browser test's turn fail that way).
            timeout_keep_alive=60,
        )
        self._server = uvicorn.Server(config)
        self._thread = threading.Thread(
            target=self._server.run, kwargs={"sockets": [sock]}, name="fakellm", daemon=True
        )
        self._thread.start()
        deadline = time.monotonic() + STARTUP_TIMEOUT_S
        while not self._server.started:
            if not self._thread.is_alive() or time.monotonic() > deadline:
                self.stop()
                raise RuntimeError("the scripted model server did not start")
            time.sleep(0.005)
        return self

    def stop(self) -> None:
        if self._server is not None:
            self._server.should_exit = True
        if self._thread is not None:
            self._thread.join(timeout=STARTUP_TIMEOUT_S)
        self._server = None
        self._thread = None
        self.port = None

    def __enter__(self) -> ScriptedModelServer:
        return self.start()

    def __exit__(
        self,
        exc_type: type[BaseException] | None,
        exc: BaseException | None,
        tb: TracebackType | None,
    ) -> None:
        self.stop()

    async def __aenter__(self) -> ScriptedModelServer:
        return await asyncio.to_thread(self.start)

    async def __aexit__(
        self,
        exc_type: type[BaseException] | None,
        exc: BaseException | None,
        tb: TracebackType | None,
    ) -> None:
        await asyncio.to_thread(self.stop)
