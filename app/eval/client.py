"""The service's HTTP API as the simulated customer uses it: a thread, messages and resumes
read as SSE, and the thread's state."""

from __future__ import annotations

import json
from collections.abc import AsyncIterator
from dataclasses import dataclass, field
from typing import Any

import httpx


class ServiceError(RuntimeError):
    """The service answered with an error status (the body's code is in the message)."""


@dataclass
class RunEvents:
    """What one run (a message, or a resume) streamed."""

    text: str = ""
    tool_calls: list[dict[str, Any]] = field(default_factory=list)
    tool_results: list[dict[str, Any]] = field(default_factory=list)
    pending: list[dict[str, Any]] = field(default_factory=list)
    status: str = "unknown"
    errors: list[str] = field(default_factory=list)
    input_tokens: int = 0
    output_tokens: int = 0

    def on(self, name: str, data: dict[str, Any]) -> None:
        if name == "token":
            self.text += str(data.get("text", ""))
        elif name == "tool_call":
            self.tool_calls.append(data)
        elif name == "tool_result":
            self.tool_results.append(data)
        elif name == "interrupt":
            self.pending = list(data.get("pending") or [])
        elif name == "error":
            self.errors.append(str(data.get("code", "error")))
        elif name == "done":
            self.status = str(data.get("status", "unknown"))
            usage = data.get("usage") or {}
            self.input_tokens = int(usage.get("input_tokens", 0))
            self.output_tokens = int(usage.get("output_tokens", 0))


class ServiceClient:
    """One signed-in user's view of the service."""

    def __init__(self, http: httpx.AsyncClient, token: str) -> None:
        self.http = http
        self.headers = {"Authorization": f"Bearer {token}"}

    async def new_thread(self) -> str:
        response = await self.http.post("/threads", headers=self.headers)
        _check(response)
        return str(response.json()["id"])

    async def send(self, session: str, content: str) -> RunEvents:
        return await self._stream(f"/threads/{session}/messages", {"content": content})

    async def resume(self, session: str, approve: bool) -> RunEvents:
        decision = "approve" if approve else "reject"
        return await self._stream(f"/threads/{session}/resume", {"decision": decision})

    async def state(self, session: str, *, working: bool = False) -> dict[str, Any]:
        params = {"view": "working"} if working else None
        response = await self.http.get(
            f"/threads/{session}/state", headers=self.headers, params=params
        )
        _check(response)
        state: dict[str, Any] = response.json()
        return state

    async def _stream(self, path: str, body: dict[str, Any]) -> RunEvents:
        events = RunEvents()
        headers = {**self.headers, "Accept": "text/event-stream"}
        async with self.http.stream("POST", path, json=body, headers=headers) as response:
            if response.status_code != 200:
                await response.aread()
                _check(response)
            async for name, data in sse_events(response.aiter_lines()):
                events.on(name, data)
        return events


async def sse_events(lines: AsyncIterator[str]) -> AsyncIterator[tuple[str, dict[str, Any]]]:
    """(event, JSON data) pairs from an SSE body; comments (heartbeats) are skipped."""
    name, data = "message", list[str]()
    async for line in lines:
        if not line:
            if data:
                yield name, json.loads("\n".join(data))
            name, data = "message", []
        elif line.startswith(":"):
            continue
        else:
            key, _, value = line.partition(":")
            value = value[1:] if value.startswith(" ") else value
            if key == "event":
                name = value
            elif key == "data":
                data.append(value)
    if data:
        yield name, json.loads("\n".join(data))


def _check(response: httpx.Response) -> None:
    if response.status_code < 400:
        return
    try:
        code = response.json()["error"]["code"]
    except (ValueError, KeyError, TypeError):
        code = response.text[:200]
    raise ServiceError(
        f"{response.request.method} {response.request.url.path}: {response.status_code} {code}"
    )
