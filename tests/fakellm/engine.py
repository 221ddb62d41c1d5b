"""The ASGI app: POST /v1/chat/completions and GET /v1/models, answered by a policy."""

from __future__ import annotations

import asyncio
import contextlib
import json
import logging
from collections.abc import Sequence
from dataclasses import replace

from starlette.applications import Starlette
from starlette.requests import Request
from starlette.responses import JSONResponse, Response
from starlette.routing import Route
from starlette.types import Message, Receive, Scope, Send

from tests.fakellm import wire
from tests.fakellm.types import ChatRequest, Fault, Latency, Policy, Reply, StreamFault

log = logging.getLogger(__name__)

DEFAULT_MODELS = ("gpt-4o-mini", "fakellm")
KEEPALIVE = b": keepalive\n\n"


class ModelEngine:
    """A policy plus what the server saw. Tests read `requests` and `errors`."""

    def __init__(
        self,
        policy: Policy,
        *,
        latency: Latency | None = None,
        api_key: str | None = None,
        models: Sequence[str] = DEFAULT_MODELS,
        record: bool = True,
    ) -> None:
        self.policy = policy
        # False for a long-running server (a benchmark's model): requests are not kept in memory.
        self.record = record
        self._initial_latency = self.latency = latency or Latency()
        self.api_key = api_key  # None: any key is accepted
        self.models = tuple(models)
        self.requests: list[ChatRequest] = []
        self.errors: list[BaseException] = []

    def reset(self, policy: Policy | None = None, *, latency: Latency | None = None) -> None:
        """Forget recorded requests and errors; optionally switch policy and latency."""
        if policy is not None:
            self.policy = policy
        self.latency = latency or self._initial_latency
        self.requests.clear()
        self.errors.clear()

    def decide(self, request: ChatRequest) -> Reply:
        if self.record:
            self.requests.append(request)
        try:
            return self.policy(request)
        except Exception as exc:
            # A policy that fails is a broken test script: say so, and tell clients not to retry.
            if self.record:
                self.errors.append(exc)
            log.warning("fakellm policy failed: %r", exc)
            # Details reach the client only in tests (recording); otherwise they stay in the log.
            detail = f"fakellm policy error: {exc!r}" if self.record else "fakellm policy error"
            fault = Fault(500, detail, "policy_error", should_retry=False)
            return Reply(fault=fault)

    def asgi_app(self) -> Starlette:
        _install_log_filter()
        return Starlette(
            routes=[
                Route("/v1/chat/completions", self._chat_completions, methods=["POST"]),
                Route("/v1/models", self._list_models, methods=["GET"]),
            ]
        )

    async def _list_models(self, request: Request) -> Response:
        data = [
            {"id": m, "object": "model", "created": 0, "owned_by": "fakellm"} for m in self.models
        ]
        return JSONResponse({"object": "list", "data": data})

    async def _chat_completions(self, request: Request) -> Response:
        if self.api_key is not None and request.headers.get("authorization") != (
            f"Bearer {self.api_key}"
        ):
            fault = Fault(401, "Incorrect API key provided.", "invalid_request_error")
            return _error(replace(fault, code="invalid_api_key", retry_after_s=None))
        try:
            body = json.loads(await request.body())
            if not isinstance(body, dict):
                raise ValueError("the body must be a JSON object")
            chat = ChatRequest.from_body(body, request.headers)
        except ValueError as exc:
            return _error(Fault(400, str(exc), "invalid_request_error", retry_after_s=None))
        return _CompletionResponse(chat, self.decide(chat), self.latency)


def _error(fault: Fault) -> JSONResponse:
    headers = {}
    if fault.retry_after_s is not None:
        headers["retry-after-ms"] = str(round(fault.retry_after_s * 1000))
    if fault.should_retry is not None:
        headers["x-should-retry"] = str(fault.should_retry).lower()
    return JSONResponse(
        wire.error_body(fault.message, fault.type, fault.code), fault.status, headers=headers
    )


class _CompletionResponse(Response):
    """Paces the answer (delay, time to first token, tokens per second), breaks it as its
    `StreamFault` says, and stops early when the client goes away, so timed-out clients
    leave no work behind."""

    def __init__(self, request: ChatRequest, reply: Reply, latency: Latency) -> None:
        super().__init__()
        self.chat = request
        self.reply = reply
        self.pace = reply.latency or latency
        self.usage = wire.Usage.of(request, reply)
        self.broken = reply.resolved_stream_fault

    async def __call__(self, scope: Scope, receive: Receive, send: Send) -> None:
        disconnected = asyncio.Event()
        watcher = asyncio.create_task(_watch_disconnect(receive, disconnected))
        try:
            if await _pause(self.reply.delay_s, disconnected):
                return
            if self.broken is not None and self.broken.kind == "hang":
                await disconnected.wait()
            elif self.reply.fault is not None:
                await _error(self.reply.fault)(scope, receive, send)
            elif self.chat.stream and not (self.broken and self.broken.kind == "plain_json"):
                await self._stream(send, disconnected)
            else:
                await self._complete(scope, receive, send, disconnected)
        finally:
            watcher.cancel()
            with contextlib.suppress(asyncio.CancelledError):
                await watcher

    async def _complete(
        self, scope: Scope, receive: Receive, send: Send, disconnected: asyncio.Event
    ) -> None:
        seconds = self.pace.ttft_ms / 1000 + self.usage.completion_tokens * self.pace.per_token_s
        if await _pause(seconds, disconnected):
            return
        if self.broken is None:
            body = wire.completion(self.chat, self.reply, self.usage)
            await JSONResponse(body)(scope, receive, send)
        elif self.broken.kind in ("wrong_schema", "plain_json"):
            await JSONResponse(wire.not_a_completion(self.chat, self.reply))(scope, receive, send)
        else:
            await self._broken_body(send, disconnected, self.broken)

    async def _broken_body(
        self, send: Send, disconnected: asyncio.Event, fault: StreamFault
    ) -> None:
        """A plain reply that drips spaces (valid JSON whitespace), or stops half-way."""
        await _start(send, b"application/json")
        if fault.kind == "drip":
            await _drip(send, disconnected, fault.every_s, b" ")
            return
        body = json.dumps(wire.completion(self.chat, self.reply, self.usage)).encode()
        await _send_body(send, body[: len(body) // 2])
        if fault.kind == "truncate":
            await send({"type": "http.response.body", "body": b"", "more_body": False})
        # reset: return without completing the response, and the server drops the connection

    async def _stream(self, send: Send, disconnected: asyncio.Event) -> None:
        await _start(send, b"text/event-stream; charset=utf-8")
        chunks = wire.chunks(self.chat, self.reply, self.usage)
        fault = self.broken
        if fault is not None:
            chunks = wire.broken_chunks(chunks, fault)
        wait = self.pace.ttft_ms / 1000
        for chunk in chunks:
            # (the usage chunk, `choices: []`, follows the finish chunk at once)
            if chunk.get("choices") != [] and await _pause(wait, disconnected):
                return
            wait = self.pace.per_token_s
            await _send_body(send, wire.sse(chunk))
        if fault is not None and fault.kind == "drip":
            await _drip(send, disconnected, fault.every_s, KEEPALIVE)
            return
        if fault is not None and fault.kind == "reset":
            return  # without completing the response: the server drops the connection
        if fault is None or fault.kind == "wrong_schema":
            await _send_body(send, wire.sse("[DONE]"))
        await send({"type": "http.response.body", "body": b"", "more_body": False})


async def _start(send: Send, content_type: bytes) -> None:
    await send(
        {
            "type": "http.response.start",
            "status": 200,
            "headers": [(b"content-type", content_type), (b"cache-control", b"no-cache")],
        }
    )


async def _drip(send: Send, disconnected: asyncio.Event, every_s: float, data: bytes) -> None:
    """`data` every `every_s` until the client goes away."""
    while not await _pause(every_s, disconnected):
        await _send_body(send, data)


async def _send_body(send: Send, data: bytes) -> None:
    await send({"type": "http.response.body", "body": data, "more_body": True})


async def _watch_disconnect(receive: Receive, disconnected: asyncio.Event) -> None:
    while True:
        message: Message = await receive()
        if message["type"] == "http.disconnect":
            disconnected.set()
            return


# Pauses up to this long are plain sleeps: the pause between two tokens (25 ms at 40
# tokens/s) is taken ~70 times a turn, and waiting on the disconnect event instead costs a
# task and a timer each time (0.19 of the machine's 2 cores at 750 open conversations in
# `make bench`). A client that leaves is then noticed at most this late.
_SHORT_PAUSE_S = 0.05


async def _pause(seconds: float, disconnected: asyncio.Event) -> bool:
    """Sleep; True if the client disconnected meanwhile."""
    if 0 < seconds <= _SHORT_PAUSE_S:
        await asyncio.sleep(seconds)
    elif seconds > 0:
        with contextlib.suppress(TimeoutError):
            await asyncio.wait_for(disconnected.wait(), seconds)
    return disconnected.is_set()


class _QuietDroppedStreams(logging.Filter):
    """A reset (`StreamFault.reset`) is deliberate; uvicorn's error line for it is noise."""

    def filter(self, record: logging.LogRecord) -> bool:
        return "returned without completing response" not in record.getMessage()


def _install_log_filter() -> None:
    uvicorn_log = logging.getLogger("uvicorn.error")
    if not any(isinstance(f, _QuietDroppedStreams) for f in uvicorn_log.filters):
        uvicorn_log.addFilter(_QuietDroppedStreams())
