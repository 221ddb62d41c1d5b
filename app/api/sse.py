"""The SSE response: ids increasing within the run, JSON data, heartbeats, no buffering."""

from __future__ import annotations

import json
from collections.abc import AsyncIterator, Iterable, Sequence
from typing import Any

from sse_starlette.event import ServerSentEvent
from sse_starlette.sse import EventSourceResponse

from app.runs.events import Event

NO_BUFFERING = {"X-Accel-Buffering": "no", "Cache-Control": "no-cache"}


def _encode(value: Any) -> str:
    return json.dumps(value, ensure_ascii=False, separators=(",", ":"), default=str)


def merged_tokens(batch: Sequence[Event]) -> list[Event]:
    """Adjacent token events as one: the text is the same, the frames are fewer."""
    out: list[Event] = []
    for name, data in batch:
        if name == "token" and out and out[-1][0] == "token":
            out[-1] = ("token", {"text": out[-1][1]["text"] + data["text"]})
        else:
            out.append((name, data))
    return out


async def _frames(batches: AsyncIterator[Sequence[Event]]) -> AsyncIterator[bytes]:
    """One body chunk per batch of queued events. Under load the run produces tokens faster
    than the socket is served; sending what has queued up as one write (and one frame per
    run of tokens) costs one trip through the ASGI stack instead of one per token."""
    n = 0
    async for batch in batches:
        frames = []
        for name, data in merged_tokens(batch):
            n += 1
            frames.append(ServerSentEvent(data=_encode(data), event=name, id=str(n)).encode())
        yield b"".join(frames)


async def one_by_one(events: AsyncIterator[Event]) -> AsyncIterator[list[Event]]:
    async for event in events:
        yield [event]


def sse_response(
    batches: AsyncIterator[Sequence[Event]], heartbeat_s: float
) -> EventSourceResponse:
    return EventSourceResponse(
        _frames(batches), ping=max(1, int(heartbeat_s)), headers=NO_BUFFERING
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
    if result.get("citations"):
        yield "citations", {"citations": result["citations"]}
