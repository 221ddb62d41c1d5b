"""One turn over HTTP + SSE, read to the end, for our service and for the peer.

The load generator runs on the same cores as the services it measures, so every millisecond
of CPU it spends on a turn is taken from the systems under test. httpx, h11 and httpx_sse
took several times the CPU per turn of this client: plain asyncio streams, HTTP/1.1 over
TCP with keep-alive, and only the part of SSE our servers send.
"""

from __future__ import annotations

import asyncio
import json
import time
from collections.abc import AsyncIterator, Callable
from dataclasses import asdict, dataclass, field
from typing import Any
from urllib.parse import urlsplit

from app.api.auth import issue_token

TURN_TIMEOUT_S = 120.0
# An idle connection older than this is dropped rather than reused: uvicorn closes idle
# keep-alive connections after 5 s by default (the peer; ours keeps them HTTP_KEEPALIVE_S,
# 75 s), and a request sent as it closes would fail the turn.
IDLE_S = 4.0
# What ends a turn as failed (by the exception's name) rather than ending the run; ValueError
# covers a malformed status line or chunk size.
ERRORS = (OSError, asyncio.IncompleteReadError, asyncio.LimitOverrunError, ValueError)

Conn = tuple[asyncio.StreamReader, asyncio.StreamWriter]


@dataclass(frozen=True, slots=True)
class SSE:
    event: str
    data: str
    id: str = ""
    retry: int | None = None


class SSEParser:
    """Bytes in, events out. Only complete blocks (up to a blank line) are parsed; the rest
    waits in the buffer. `\\r\\n` becomes `\\n` first, so a `\\r` left at the end of one chunk
    pairs with the `\\n` that starts the next."""

    def __init__(self) -> None:
        self._buffer = b""

    def feed(self, chunk: bytes) -> list[SSE]:
        buffer = self._buffer + chunk
        if b"\r" in buffer:
            buffer = buffer.replace(b"\r\n", b"\n")
        *blocks, self._buffer = buffer.split(b"\n\n")
        return [e for b in blocks if (e := parse_block(b.decode())) is not None]


def parse_block(block: str) -> SSE | None:
    """One event from the lines of a block, or None when it has no field (a ping comment)."""
    event, data, id_, retry, seen = "", [], "", None, False
    for line in block.split("\n"):
        if not line or line[0] == ":":
            continue
        name, _, value = line.partition(":")
        if value[:1] == " ":
            value = value[1:]
        if name == "data":
            data.append(value)
        elif name == "event":
            event = value
        elif name == "id":
            id_ = value
        elif name == "retry" and value.isdigit():
            retry = int(value)
        else:
            continue
        seen = True
    return SSE(event or "message", "\n".join(data), id_, retry) if seen else None


class Pool:
    """Keep-alive HTTP/1.1 connections to one `http://host:port`: an idle one is reused, else
    a new one is opened; at most `connections` are kept idle. `opened` counts connects."""

    def __init__(self, base_url: str, connections: int) -> None:
        url = urlsplit(base_url)
        self.host, self.port = url.hostname or "127.0.0.1", url.port or 80
        self.connections = connections
        self.opened = 0
        self._idle: list[tuple[Conn, float]] = []

    async def acquire(self) -> Conn:
        while self._idle:
            conn, since = self._idle.pop()
            if not conn[0].at_eof() and time.monotonic() - since < IDLE_S:
                return conn
            conn[1].close()
        self.opened += 1
        return await asyncio.open_connection(self.host, self.port)

    def release(self, conn: Conn, reuse: bool) -> None:
        if reuse and len(self._idle) < self.connections and not conn[0].at_eof():
            self._idle.append((conn, time.monotonic()))
        else:
            conn[1].close()

    def request(self, path: str, body: dict[str, Any], headers: dict[str, str]) -> bytes:
        payload = json.dumps(body, separators=(",", ":")).encode()
        extra = "".join(f"{k}: {v}\r\n" for k, v in headers.items())
        head = (
            f"POST {path} HTTP/1.1\r\nHost: {self.host}:{self.port}\r\n"
            "Content-Type: application/json\r\nAccept: text/event-stream\r\n"
            f"Content-Length: {len(payload)}\r\n{extra}\r\n"
        )
        return head.encode("latin-1") + payload

    async def aclose(self) -> None:
        for (_, writer), _since in self._idle:
            writer.close()
        self._idle = []


async def read_head(reader: asyncio.StreamReader) -> tuple[int, dict[str, str], bool]:
    """Status, headers (lower-case names) and whether the connection may be reused."""
    head = (await reader.readuntil(b"\r\n\r\n")).decode("latin-1")
    status_line, *lines = head[:-4].split("\r\n")
    version, status, *_ = status_line.split(" ", 2)
    fields: dict[str, str] = {}
    for line in lines:
        name, _, value = line.partition(":")
        fields[name.strip().lower()] = value.strip()
    reuse = version == "HTTP/1.1" and fields.get("connection", "").lower() != "close"
    return int(status), fields, reuse


async def read_body(reader: asyncio.StreamReader, fields: dict[str, str]) -> AsyncIterator[bytes]:
    if "chunked" in fields.get("transfer-encoding", "").lower():
        while size := int((await reader.readuntil(b"\r\n")).split(b";", 1)[0], 16):
            yield (await reader.readexactly(size + 2))[:-2]
        while await reader.readuntil(b"\r\n") != b"\r\n":
            pass  # trailers, up to the empty line
    elif "content-length" in fields:
        yield await reader.readexactly(int(fields["content-length"]))
    else:
        while chunk := await reader.read(65536):
            yield chunk


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


# The first word of benchmarks/policy.py's answer when the order lookup failed (a turn that
# "completed" wrong); a word, as the answer streams a few words a token event.
WRONG_ANSWER = "Sorry"


class OurClient:
    """POST /threads/{session}/messages with a bearer token; SSE events run..done."""

    def __init__(self, http: Pool, secret: str) -> None:
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

        answer: list[str] = []

        def on_event(sse: SSE) -> None:
            nonlocal ttft, error, done
            if sse.event == "token":
                if ttft is None:
                    ttft = (time.perf_counter() - t0) * 1000
                answer.append(sse.data)
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
        if error is None and any(WRONG_ANSWER in part for part in answer):
            # completed, but the model answered from a failed tool (e.g. no pooled connection)
            error = "wrong answer"
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

    def __init__(self, http: Pool) -> None:
        self.http = http

    async def turn(self, user_id: str, session: str, text: str) -> TurnResult:
        body = {"thread_id": f"{user_id}:{session}", "user_id": user_id, "message": text}
        wall = time.time()
        t0 = time.perf_counter()
        ttft: float | None = None
        finished = False

        def on_event(sse: SSE) -> None:
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
    http: Pool,
    path: str,
    body: dict[str, Any],
    headers: dict[str, str],
    on_event: Callable[[SSE], None],
) -> tuple[float | None, int, str | None]:
    """POST `body` and read the SSE response to its end, handing each event to `on_event`.
    Returns (when the response opened, events read, the error if the stream failed). A
    connection that failed, timed out or was told to close is closed, not reused."""
    opened: float | None = None
    events = 0
    conn: Conn | None = None
    reuse = False
    try:
        async with asyncio.timeout(TURN_TIMEOUT_S):
            conn = reader, writer = await http.acquire()
            writer.write(http.request(path, body, headers))
            await writer.drain()
            status, fields, keep = await read_head(reader)
            opened = time.time()
            parser = SSEParser()
            refusal = b""
            async for chunk in read_body(reader, fields):
                if status == 200:
                    for sse in parser.feed(chunk):
                        events += 1
                        on_event(sse)
                else:
                    refusal += chunk
            reuse = keep  # a body read to EOF leaves the reader at EOF: release closes it
    except ERRORS as exc:  # TimeoutError is an OSError
        return opened, events, type(exc).__name__
    finally:
        if conn is not None:
            http.release(conn, reuse)
    return opened, events, None if status == 200 else f"http {status}{error_code(refusal)}"


def error_code(body: bytes) -> str:
    """` overloaded`, ` database_unavailable`...: the code of our JSON error body, if any."""
    try:
        code = json.loads(body)["error"]["code"]
    except (ValueError, KeyError, TypeError):
        return ""
    return f" {code}" if isinstance(code, str) else ""


def http_client(base_url: str, connections: int) -> Pool:
    return Pool(base_url, connections)
