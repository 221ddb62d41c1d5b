"""One turn over HTTP + SSE, read to the end, for our service and for the peer."""

from __future__ import annotations

import json
import time
from collections.abc import Callable
from dataclasses import asdict, dataclass, field
from typing import Any

import httpx
from httpx_sse import ServerSentEvent, aconnect_sse

from app.api.auth import issue_token

TURN_TIMEOUT_S = 120.0


@dataclass
class TurnResult:
    start: float  # wall clock (time.time) when the request was sent
    latency_ms: float  # request sent -> stream fully read
    ttft_ms: float | None  # request sent -> first answer token
    ok: bool
    error: str | None = None
    input_tokens: int | None = None
    output_tokens: int | None = None
    events: int = 0
    extra: dict[str, Any] = field(default_factory=dict)

    def as_dict(self) -> dict[str, Any]:
        return asdict(self)


class OurClient:
    """POST /threads/{session}/messages with a bearer token; SSE events run..done."""

    def __init__(self, http: httpx.AsyncClient, secret: str) -> None:
        self.http = http
        self.secret = secret
        self._tokens: dict[str, str] = {}

    def _token(self, user_id: str) -> str:
        if user_id not in self._tokens:
            self._tokens[user_id] = issue_token(self.secret, user_id, ttl_s=24 * 3600)
        return self._tokens[user_id]

    async def turn(self, user_id: str, session: str, text: str) -> TurnResult:
        headers = {"Authorization": f"Bearer {self._token(user_id)}"}
        wall = time.time()
        t0 = time.perf_counter()
        ttft: float | None = None
        done: dict[str, Any] | None = None
        error: str | None = None

        def on_event(sse: ServerSentEvent) -> None:
            nonlocal ttft, error, done
            if sse.event == "token" and ttft is None:
                ttft = (time.perf_counter() - t0) * 1000
            elif sse.event == "error":
                error = "sse error: " + json.loads(sse.data).get("code", "?")
            elif sse.event == "done":
                done = json.loads(sse.data)

        path = f"/threads/{session}/messages"
        opened, events, failed = await read_stream(
            self.http, path, {"content": text}, headers, on_event
        )
        error = failed or error
        latency = (time.perf_counter() - t0) * 1000
        if error is None and (done is None or done.get("status") != "completed"):
            error = f"status {done.get('status') if done else 'no done event'}"
        usage = (done or {}).get("usage") or {}
        return TurnResult(
            start=wall,
            latency_ms=latency,
            ttft_ms=ttft,
            ok=error is None,
            error=error,
            input_tokens=usage.get("input_tokens"),
            output_tokens=usage.get("output_tokens"),
            events=events,
            extra={"opened": opened},
        )


class PeerClient:
    """POST /chat {thread_id, user_id, message}; `data:` lines until [DONE]."""

    def __init__(self, http: httpx.AsyncClient) -> None:
        self.http = http

    async def turn(self, user_id: str, session: str, text: str) -> TurnResult:
        body = {"thread_id": f"{user_id}:{session}", "user_id": user_id, "message": text}
        wall = time.time()
        t0 = time.perf_counter()
        ttft: float | None = None
        finished = False

        def on_event(sse: ServerSentEvent) -> None:
            nonlocal ttft, finished
            if sse.data == "[DONE]":
                finished = True
            elif ttft is None:
                ttft = (time.perf_counter() - t0) * 1000

        opened, events, error = await read_stream(self.http, "/chat", body, {}, on_event)
        latency = (time.perf_counter() - t0) * 1000
        if error is None and not finished:
            error = "stream ended without [DONE]"
        return TurnResult(
            start=wall,
            latency_ms=latency,
            ttft_ms=ttft,
            ok=error is None,
            error=error,
            events=events,
            extra={"opened": opened},
        )


async def read_stream(
    http: httpx.AsyncClient,
    path: str,
    body: dict[str, Any],
    headers: dict[str, str],
    on_event: Callable[[ServerSentEvent], None],
) -> tuple[float | None, int, str | None]:
    """POST `body` and read the SSE response to its end, handing each event to `on_event`.
    Returns (when the response opened, events read, the error if the stream failed)."""
    opened: float | None = None
    events = 0
    try:
        async with aconnect_sse(
            http, "POST", path, json=body, headers=headers, timeout=TURN_TIMEOUT_S
        ) as source:
            opened = time.time()
            if source.response.status_code != 200:
                await source.response.aread()
                return opened, events, f"http {source.response.status_code}"
            async for sse in source.aiter_sse():
                events += 1
                on_event(sse)
    except (httpx.HTTPError, OSError) as exc:
        return opened, events, type(exc).__name__
    return opened, events, None


def http_client(base_url: str, connections: int) -> httpx.AsyncClient:
    limits = httpx.Limits(max_connections=connections + 8, max_keepalive_connections=connections)
    return httpx.AsyncClient(base_url=base_url, limits=limits, timeout=TURN_TIMEOUT_S)
