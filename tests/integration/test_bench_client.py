"""The benchmark load generator's own HTTP/1.1 + SSE client, against the real service and
against httpx_sse reading the same turn."""

from __future__ import annotations

import asyncio
import json
from collections.abc import AsyncIterator, Iterator
from typing import Any

import pytest
from httpx_sse import aconnect_sse
from psycopg_pool import AsyncConnectionPool

import benchmarks.client
from app.config import Settings
from benchmarks.client import SSE, OurClient, Pool, SSEParser, http_client, read_stream
from tests.fakellm import ChatRequest, Reply, ScriptedModelServer
from tests.integration.agent_harness import load_small_shop
from tests.integration.api_harness import LiveServer, live_server

NOAH = "noah_brown_6181"
PENDING_ORDER = "#W2611340"
QUESTION = f"Where is my order {PENDING_ORDER}?"


def feed_all(chunks: list[bytes]) -> list[SSE]:
    parser = SSEParser()
    return [event for chunk in chunks for event in parser.feed(chunk)]


class TestSSEParser:
    def test_crlf_split_across_chunks_multiline_data_pings_and_default_name(self) -> None:
        stream = (
            b": ping - 2025-01-01 00:00:00\r\n\r\n"
            b'event: token\r\ndata: {"text":"Hi"}\r\nid: 1\r\n\r\n'
            b"data: first\r\ndata:second\r\nretry: 3000\r\n\r\n"
            b": ping\r\n\r\n"
            b"event: done\r\ndata: caf\xc3\xa9\r\nid: 2\r\n\r\n"
            b"data: not finished"
        )
        expected = [
            SSE("token", '{"text":"Hi"}', "1"),
            SSE("message", "first\nsecond", "", 3000),
            SSE("done", "café", "2"),
        ]
        assert feed_all([stream]) == expected
        # Every split point: a \r\n (and the blank line) cut between \r and \n, a UTF-8
        # character cut in two, a field name cut in two.
        for cut in range(1, len(stream)):
            assert feed_all([stream[:cut], stream[cut:]]) == expected, cut
        assert feed_all([bytes([b]) for b in stream]) == expected

    def test_lf_lines_as_the_peer_sends_them(self) -> None:
        chunks = [b'data: {"content":"Hel', b'lo"}\n', b"\ndata: [DONE]\n\n"]
        assert [(e.event, e.data) for e in feed_all(chunks)] == [
            ("message", '{"content":"Hello"}'),
            ("message", "[DONE]"),
        ]


def order_lookup(request: ChatRequest) -> Reply:
    """Look the order up, then answer in one word: one token event, so the count of events
    does not depend on how the server batched the tokens."""
    if request.pending_tool_results():
        return Reply.say("Pending.")
    return Reply.call("get_order_details", order_id=PENDING_ORDER)


@pytest.fixture(scope="module")
def server(database_url: str, scripted_model_session: ScriptedModelServer) -> Iterator[LiveServer]:
    settings = Settings(database_url=database_url, app_env="dev", _env_file=None)
    with live_server(settings, scripted_model_session) as live:
        yield live


@pytest.fixture
async def pool(
    server: LiveServer, db: AsyncConnectionPool[Any], model_server: ScriptedModelServer
) -> AsyncIterator[Pool]:
    await load_small_shop(db)
    model_server.use(order_lookup)
    http = http_client(server.url, 4)
    yield http
    await http.aclose()


async def with_httpx_sse(server: LiveServer, session: str) -> list[tuple[str, dict[str, Any]]]:
    async with (
        server.client() as client,
        aconnect_sse(
            client,
            "POST",
            f"/threads/{session}/messages",
            json={"content": QUESTION},
            headers=server.headers(NOAH),
        ) as source,
    ):
        assert source.response.status_code == 200
        return [(e.event, json.loads(e.data)) async for e in source.aiter_sse()]


async def test_a_turn_reads_as_httpx_sse_reads_it_and_reuses_the_connection(
    server: LiveServer, pool: Pool
) -> None:
    secret = server.settings.jwt_secret.get_secret_value()
    ours = await OurClient(pool, secret).turn(NOAH, "bench-a", QUESTION)
    reference = await with_httpx_sse(server, "bench-b")

    assert ours.error is None and ours.ok, ours
    assert ours.input_tokens and ours.output_tokens  # read from the `done` event
    assert ours.ttft_ms is not None and ours.extra["opened"] is not None
    names = [name for name, _ in reference]
    assert names[0] == "run" and "tool_result" in names and names[-1] == "done", names
    assert ours.events == len(reference)

    # The second turn, on the same pool, goes over the same connection.
    seen: list[tuple[str, dict[str, Any]]] = []

    def on_event(sse: SSE) -> None:
        seen.append((sse.event, json.loads(sse.data)))

    _, events, error = await read_stream(
        pool, "/threads/bench-c/messages", {"content": QUESTION}, server.headers(NOAH), on_event
    )
    assert error is None and events == len(seen)
    assert [name for name, _ in seen] == names
    assert seen[-1][1]["status"] == "completed"
    texts = [
        [data.get("text") for name, data in run if name == "token"] for run in (seen, reference)
    ]
    assert texts[0] == texts[1] == ["Pending."]
    assert pool.opened == 1


async def test_an_error_status_is_reported_and_its_body_read_so_the_connection_is_reused(
    server: LiveServer, pool: Pool
) -> None:
    bad = {"Authorization": "Bearer not-a-token"}
    for _ in range(2):
        opened, events, error = await read_stream(
            pool, "/threads/x/messages", {"content": "hi"}, bad, lambda sse: None
        )
        # the status, and the code of our JSON error body (a refusal reads `overloaded`)
        assert (error, events) == ("http 401 unauthorized", 0) and opened is not None
    assert pool.opened == 1


def chunked(*parts: bytes) -> bytes:
    body = b"".join(b"%x\r\n%s\r\n" % (len(p), p) for p in parts)
    return b"HTTP/1.1 200 OK\r\nTransfer-Encoding: chunked\r\n\r\n" + body + b"0\r\nX: 1\r\n\r\n"


def sized(body: bytes, status: bytes = b"200 OK", head: bytes = b"") -> bytes:
    return b"HTTP/1.1 %s\r\n%sContent-Length: %d\r\n\r\n%s" % (status, head, len(body), body)


async def test_connection_close_and_unframed_bodies_are_not_reused(
    monkeypatch: pytest.MonkeyPatch,
) -> None:
    """A raw server that keeps every connection open unless the body ends at EOF: only the
    client's reading of `Connection: close` and of the framing decides what is reused."""
    replies = [
        chunked(b"data: a\r\n\r", b"\nevent: done\r\ndata: b\r\n\r\n"),
        sized(b"data: c\n\n"),
        sized(b"data: d\n\n", head=b"Connection: close\r\n"),
        b"HTTP/1.1 200 OK\r\n\r\ndata: e\r\n\r\ndata: f\r\n\r\n",
        chunked(b"data: g\n\n"),
        sized(b"busy!", b"503 Service Unavailable"),
        chunked(b"data: h\n\n"),
    ]
    accepted = 0
    monkeypatch.setattr(benchmarks.client, "TURN_TIMEOUT_S", 5.0)  # a hang fails fast

    async def handle(reader: asyncio.StreamReader, writer: asyncio.StreamWriter) -> None:
        nonlocal accepted
        accepted += 1
        try:
            while True:
                head = await reader.readuntil(b"\r\n\r\n")
                length = int(head.lower().split(b"content-length: ")[1].split(b"\r\n")[0])
                await reader.readexactly(length)
                reply = replies.pop(0)
                writer.write(reply)
                await writer.drain()
                if b"Length" not in reply and b"chunked" not in reply:
                    break
        except asyncio.IncompleteReadError:
            pass  # the client closed it
        writer.close()

    listener = await asyncio.start_server(handle, "127.0.0.1", 0)
    port = listener.sockets[0].getsockname()[1]
    pool = http_client(f"http://127.0.0.1:{port}", 4)
    got = []
    try:
        for _ in range(len(replies)):
            received: list[SSE] = []
            _, _, error = await read_stream(pool, "/", {}, {}, received.append)
            got.append((error, [(e.event, e.data) for e in received]))
    finally:
        await pool.aclose()
        listener.close()
    assert got == [
        (None, [("message", "a"), ("done", "b")]),
        (None, [("message", "c")]),
        (None, [("message", "d")]),  # then closed: it said Connection: close
        (None, [("message", "e"), ("message", "f")]),  # then closed: it ended at EOF
        (None, [("message", "g")]),
        ("http 503", []),
        (None, [("message", "h")]),
    ]
    assert pool.opened == accepted == 3
