"""The SSE response: ids increasing within the run, JSON data, heartbeats, no buffering."""

from __future__ import annotations

import json
from collections.abc import AsyncIterator, Iterable
from typing import Any

from sse_starlette.sse import EventSourceResponse

from app.runs.events import Event

NO_BUFFERING = {"X-Accel-Buffering": "no", "Cache-Control": "no-cache"}


def _encode(value: Any) -> str:
    return json.dumps(value, ensure_ascii=False, separators=(",", ":"), default=str)


async def _numbered(events: AsyncIterator[Event]) -> AsyncIterator[dict[str, str]]:
    n = 0
    async for name, data in events:
        n += 1
        yield {"event": name, "id": str(n), "data": _encode(data)}


def sse_response(events: AsyncIterator[Event], heartbeat_s: float) -> EventSourceResponse:
    return EventSourceResponse(
        _numbered(events), ping=max(1, int(heartbeat_s)), headers=NO_BUFFERING
    )


async def replay(result: dict[str, Any], session_id: str, run_id: str) -> AsyncIterator[Event]:
    """The events of an earlier, finished turn (a retried client_message_id)."""
    yield (
        "run",
        {"run_id": run_id, "thread_id": session_id, "checkpoint_id": result.get("checkpoint_id")},
    )
    for event in _result_events(result):
        yield event
    yield (
        "done",
        {
            "status": result.get("status", "completed"),
            "checkpoint_id": result.get("checkpoint_id"),
            "usage": result.get("usage") or {"input_tokens": 0, "output_tokens": 0},
        },
    )


def _result_events(result: dict[str, Any]) -> Iterable[Event]:
    for m in result.get("messages", []):
        if m.get("role") == "assistant":
            for call in m.get("tool_calls") or []:
                yield "tool_call", call
            if m.get("content"):
                yield "token", {"text": m["content"]}
        elif m.get("role") == "tool":
            yield (
                "tool_result",
                {
                    "id": m.get("tool_call_id"),
                    "name": m.get("name"),
                    "status": "error" if m.get("status") == "error" else "ok",
                    "content": m.get("content", "")[:500],
                },
            )
    if result.get("pending"):
        yield "interrupt", {"pending": result["pending"]}
