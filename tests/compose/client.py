"""One conversation through the load balancer: a message, its confirmation, the write.

What README "Client disconnect and process death" asks of a client, for a turn that stops
for a confirmation: POST the message (with a client_message_id) and read the stream to its
`interrupt` and `done` `interrupted`; POST /resume `approve` and read that stream to `done`
`completed`. When a stream breaks (its replica was killed, or this client let go on
purpose), follow the same run again: GET {Content-Location}/stream with Last-Event-ID,
through the balancer, so on any live replica. A run whose owner died ends with `error
run_lost` and `done` `abandoned`; then the same request is sent again (the message with the
same client_message_id, or the approval), which finishes the turn without running a write
twice. 409 thread_busy (the dead owner's lease) and 502/503 are waited out.
"""

from __future__ import annotations

import asyncio
import time
from dataclasses import dataclass, field
from typing import Any

import httpx

from tests.scale.client import sse_events

RETRY_PAUSE_S = 0.3
GIVE_UP_S = 120.0
STREAM_S = 60.0


@dataclass
class Run:
    """One run, over however many streams it took to read it."""

    location: str
    streams: int = 0
    ids: list[int] = field(default_factory=list)  # every event id, in the order received
    tokens: list[str] = field(default_factory=list)
    events: list[str] = field(default_factory=list)
    done: dict[str, Any] | None = None

    @property
    def last_id(self) -> int:
        return max(self.ids, default=0)


@dataclass
class Step:
    """One request of the conversation (the message, or the approval) to its end."""

    path: str
    posts: int = 0
    follows: int = 0  # streams of a run followed again after a break
    broken: int = 0  # streams that ended without `done`, for whatever reason
    busy: int = 0
    bad_gateway: int = 0
    run_lost: int = 0
    abandoned: int = 0
    runs: list[Run] = field(default_factory=list)
    status: str | None = None

    @property
    def last(self) -> Run:
        return self.runs[-1]


async def step(
    http: httpx.AsyncClient,
    headers: dict[str, str],
    path: str,
    body: dict[str, Any],
    *,
    want: str,
    let_go_after_tokens: int | None = None,
    on_token: asyncio.Event | None = None,
) -> Step:
    """POST `body` to `path` and follow its run to a `done` with status `want`."""
    result = Step(path)
    sse = {**headers, "Accept": "text/event-stream"}
    started = time.monotonic()
    run: Run | None = None
    while time.monotonic() - started < GIVE_UP_S:
        try:
            async with asyncio.timeout(STREAM_S):
                if run is None:
                    result.posts += 1
                    run = await _post(http, sse, path, body, result, let_go_after_tokens, on_token)
                    let_go_after_tokens = None
                else:
                    result.follows += 1
                    following = {**sse, "Last-Event-ID": str(run.last_id)}
                    await _follow(http, following, run, result, on_token)
        except TimeoutError:
            raise AssertionError(f"{path}: a stream without `done`: {result}") from None
        if run is None:
            await asyncio.sleep(RETRY_PAUSE_S)
            continue
        if run.done is None:
            result.broken += 1
            await asyncio.sleep(RETRY_PAUSE_S)
            continue
        result.status = run.done["status"]
        if result.status == want:
            return result
        if result.status == "abandoned":
            result.abandoned += 1
            run = None  # the same request again
            continue
        raise AssertionError(f"{path}: done {run.done}, wanted {want}: {result}")
    raise AssertionError(f"{path}: no `done` {want} in {GIVE_UP_S}s: {result}")


def _take(run: Run, result: Step, seq: int, name: str, data: dict[str, Any]) -> None:
    run.ids.append(seq)
    run.events.append(name)
    if name == "token":
        run.tokens.append(data["text"])
    elif name == "error" and data.get("code") == "run_lost":
        result.run_lost += 1
    elif name == "done":
        run.done = data


async def _post(
    http: httpx.AsyncClient,
    headers: dict[str, str],
    path: str,
    body: dict[str, Any],
    result: Step,
    let_go_after_tokens: int | None,
    on_token: asyncio.Event | None,
) -> Run | None:
    run: Run | None = None
    try:
        async with http.stream("POST", path, json=body, headers=headers) as response:
            if response.status_code == 409:
                result.busy += 1
                return None
            if response.status_code in (502, 503, 504):
                result.bad_gateway += 1
                return None
            assert response.status_code == 200, (response.status_code, await response.aread())
            run = Run(response.headers["content-location"], streams=1)
            result.runs.append(run)
            async for seq, name, data in sse_events(response):
                _take(run, result, seq, name, data)
                if name == "token" and on_token is not None:
                    on_token.set()
                if let_go_after_tokens is not None and len(run.tokens) >= let_go_after_tokens:
                    break
    except httpx.TransportError:
        pass  # refused, reset, or cut mid-stream: `run` says how far it got
    return run


async def _follow(
    http: httpx.AsyncClient,
    headers: dict[str, str],
    run: Run,
    result: Step,
    on_token: asyncio.Event | None,
) -> None:
    try:
        async with http.stream("GET", run.location + "/stream", headers=headers) as response:
            if response.status_code in (502, 503, 504):
                result.bad_gateway += 1
                return
            assert response.status_code == 200, (response.status_code, await response.aread())
            run.streams += 1
            async for seq, name, data in sse_events(response):
                _take(run, result, seq, name, data)
                if name == "token" and on_token is not None:
                    on_token.set()
    except httpx.TransportError:
        pass
