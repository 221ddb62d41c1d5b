"""The SSE response: the run's events with their ids, JSON data, heartbeats, no buffering."""

from __future__ import annotations

from collections.abc import AsyncIterator, Iterable, Sequence
from typing import Any

from sse_starlette.sse import EventSourceResponse
from starlette.types import Message, Send

from app.metrics import open_stream
from app.runs.stream import (
    Citations,
    Done,
    Interrupted,
    RunStarted,
    Sequenced,
    Stored,
    StreamEvent,
    Token,
    ToolCalled,
    ToolResult,
    frame,
    merged_tokens,
)

NO_BUFFERING = {"X-Accel-Buffering": "no", "Cache-Control": "no-cache"}


async def _frames(batches: AsyncIterator[Sequence[Sequenced]]) -> AsyncIterator[bytes]:
    """One body chunk per batch of events. Under load the run produces tokens faster than
    the socket is served; sending what has queued up as one write (and one frame per run of
    tokens) costs one trip through the ASGI stack instead of one per token."""
    with open_stream():
        async for batch in batches:
            yield b"".join(frame(seq, event) for seq, event in merged_tokens(batch))


async def all_at_once(events: Sequence[Sequenced]) -> AsyncIterator[Sequence[Sequenced]]:
    yield events


class _EventSource(EventSourceResponse):
    """sse-starlette sends each frame inside `anyio.move_on_after(send_timeout)`: a cancel
    scope per frame (~6 us, one per token at a model's pace) even when, as here, no
    `send_timeout` is set. Without one the frame is sent as is; with one, as upstream does
    (tests/unit/test_sse_fast_paths.py fails if upstream stops sending through this method)."""

    async def _send_with_timeout(self, send: Send, message: Message) -> None:
        if self.send_timeout is None:
            await send(message)
        else:
            await super()._send_with_timeout(send, message)


def sse_response(
    batches: AsyncIterator[Sequence[Sequenced]], heartbeat_s: float
) -> EventSourceResponse:
    return _EventSource(_frames(batches), ping=max(1, int(heartbeat_s)), headers=NO_BUFFERING)


def replay(result: dict[str, Any], session_id: str, run_id: str) -> list[Sequenced]:
    """The events of an earlier, finished turn (a retried client_message_id)."""
    events: list[StreamEvent] = [
        RunStarted(run_id=run_id, thread_id=session_id, checkpoint_id=result.get("checkpoint_id")),
        *_result_events(result),
        Done(
            status=result.get("status", "completed"),
            checkpoint_id=result.get("checkpoint_id"),
            usage=result.get("usage") or {"input_tokens": 0, "output_tokens": 0},
        ),
    ]
    return list(enumerate(events, start=1))


def _result_events(result: dict[str, Any]) -> Iterable[StreamEvent]:
    if result.get("status") == "handed_off":  # stored for the person holding the thread
        for m in result.get("messages", []):
            yield Stored(message=m, control=result.get("control") or {})
        return
    for m in result.get("messages", []):
        if m.get("role") == "assistant":
            for call in m.get("tool_calls") or []:
                yield ToolCalled(
                    id=call.get("id"),
                    name=call["name"],
                    args=call.get("args") or {},
                    message_id=m.get("id"),
                )
            if m.get("content"):
                yield Token(text=m["content"], message_id=m.get("id"))
        elif m.get("role") == "tool":
            yield ToolResult(
                id=m.get("tool_call_id"),
                name=m.get("name"),
                status="error" if m.get("status") == "error" else "ok",
                content=m.get("content", "")[:500],
                message_id=m.get("id"),
            )
    if result.get("pending"):
        yield Interrupted(pending=result["pending"])
    if result.get("citations"):
        yield Citations(citations=result["citations"])
