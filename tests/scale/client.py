"""A client that finishes its turn whatever happens to the replica serving it.

What README "Client disconnect and process death" asks of a client: POST the message with a
client_message_id; when the stream breaks, follow the run again (GET
/threads/{id}/runs/{run_id}/stream with Last-Event-ID, through the load balancer, so on
any live replica); a run whose owner died ends with `error run_lost` and `done` status
`abandoned`, and then the message is sent again with the same client_message_id, which
does the turn (a write it committed is replayed, never run twice). 409 thread_busy (the
dead owner's lease has not expired yet) and 502/503 are waited out.
"""

from __future__ import annotations

import asyncio
import json
import time
from collections.abc import AsyncIterator
from dataclasses import dataclass, field
from typing import Any

import httpx

RETRY_PAUSE_S = 0.3
GIVE_UP_S = 90.0
# One stream: a turn takes seconds, following a dead owner's run ends once its lease has
# expired; a stream still open after this never sent its `done`.
STREAM_S = 60.0
Event = tuple[int, str, dict[str, Any]]  # (SSE id, event name, data)


@dataclass
class Conversation:
    """What one conversation's client saw: every stream's events, and how it got there."""

    session: str
    user_id: str
    posts: int = 0  # POSTs of the message (1 when nothing went wrong)
    follows: int = 0  # GET .../stream after a broken stream
    dropped: int = 0  # streams that broke before `done` (the test's own drop included)
    busy: int = 0  # 409 thread_busy answers
    bad_gateway: int = 0  # 502/503 from the load balancer or the service
    abandoned: int = 0  # runs that ended `abandoned` (their owner died)
    run_lost: int = 0  # `error run_lost` events
    runs: list[str] = field(default_factory=list)
    status: str | None = None  # the last `done` status
    text: str = ""  # the answer of the run that completed, from its streams
    seconds: float = 0.0


async def sse_events(response: httpx.Response) -> AsyncIterator[Event]:
    seq, event, data = 0, "message", list[str]()
    async for line in response.aiter_lines():
        if not line:
            if data:
                yield seq, event, json.loads("\n".join(data))
            event, data = "message", []
        elif line.startswith(":"):
            continue
        elif line.startswith("id:"):
            seq = int(line[3:].strip())
        elif line.startswith("event:"):
            event = line[6:].strip()
        elif line.startswith("data:"):
            data.append(line[5:].lstrip())


class _Run:
    """One run's stream(s): the events read so far, and where to follow it from."""

    def __init__(self, location: str) -> None:
        self.location = location
        self.last_id = 0
        self.tokens: list[str] = []
        self.done: dict[str, Any] | None = None

    def take(self, conversation: Conversation, seq: int, name: str, data: dict[str, Any]) -> None:
        self.last_id = max(self.last_id, seq)
        if name == "token":
            self.tokens.append(data["text"])
        elif name == "error" and data.get("code") == "run_lost":
            conversation.run_lost += 1
        elif name == "done":
            self.done = data


async def converse(
    http: httpx.AsyncClient,
    headers: dict[str, str],
    session: str,
    user_id: str,
    text: str,
    *,
    drop_after_tokens: int | None = None,
) -> Conversation:
    """One turn, to its end: a `done` with status `completed` (or an AssertionError after
    GIVE_UP_S). `drop_after_tokens`: leave the first stream after that many tokens (a phone
    in a tunnel) and follow the run again."""
    conversation = Conversation(session, user_id)
    body = {"content": text, "client_message_id": f"{session}-m1"}
    sse = {**headers, "Accept": "text/event-stream"}
    started = time.monotonic()
    run: _Run | None = None
    while time.monotonic() - started < GIVE_UP_S:
        try:
            async with asyncio.timeout(STREAM_S):
                if run is None:  # send (again) the message
                    conversation.posts += 1
                    run = await _post(http, sse, session, body, conversation, drop_after_tokens)
                    drop_after_tokens = None
                else:  # follow the run again, on whichever replica the balancer picks
                    conversation.follows += 1
                    last = {**sse, "Last-Event-ID": str(run.last_id)}
                    await _follow(http, last, run, conversation)
        except TimeoutError:
            raise AssertionError(f"{session}: a stream without `done`: {conversation}") from None
        if run is None:
            await asyncio.sleep(RETRY_PAUSE_S)
            continue
        if run.done is None:  # the stream broke: follow the same run
            conversation.dropped += 1
            await asyncio.sleep(RETRY_PAUSE_S)
            continue
        conversation.status = run.done["status"]
        if conversation.status == "completed":
            conversation.text = "".join(run.tokens)
            conversation.seconds = time.monotonic() - started
            return conversation
        if conversation.status == "abandoned":
            conversation.abandoned += 1
        run = None  # abandoned or failed: the same message again
    raise AssertionError(f"{session}: no completed turn in {GIVE_UP_S}s: {conversation}")


async def _post(
    http: httpx.AsyncClient,
    headers: dict[str, str],
    session: str,
    body: dict[str, Any],
    conversation: Conversation,
    drop_after_tokens: int | None,
) -> _Run | None:
    run: _Run | None = None
    try:
        async with http.stream(
            "POST", f"/threads/{session}/messages", json=body, headers=headers
        ) as response:
            if response.status_code == 409:
                conversation.busy += 1
                return None
            if response.status_code in (502, 503, 504):
                conversation.bad_gateway += 1
                return None
            assert response.status_code == 200, (response.status_code, await response.aread())
            run = _Run(response.headers["content-location"])
            conversation.runs.append(run.location)
            async for seq, name, data in sse_events(response):
                run.take(conversation, seq, name, data)
                if drop_after_tokens is not None and len(run.tokens) >= drop_after_tokens:
                    break
    except httpx.TransportError:
        pass  # refused, reset, or cut mid-stream: `run` says how far it got
    return run


async def _follow(
    http: httpx.AsyncClient, headers: dict[str, str], run: _Run, conversation: Conversation
) -> None:
    try:
        async with http.stream("GET", run.location + "/stream", headers=headers) as response:
            if response.status_code in (502, 503, 504):
                conversation.bad_gateway += 1
                return
            assert response.status_code == 200, (response.status_code, await response.aread())
            async for seq, name, data in sse_events(response):
                run.take(conversation, seq, name, data)
    except httpx.TransportError:
        pass
