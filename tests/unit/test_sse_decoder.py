"""The model stream's decoder yields what the openai SDK's own decoder yields."""

from __future__ import annotations

import inspect
from collections.abc import AsyncIterator, Iterator
from typing import Any

import httpx2
import openai
import pytest
from openai._streaming import ServerSentEvent, SSEDecoder

from app.agent.sse_decoder import EventStreamDecoder

CHUNK = (
    b'data: {"id":"c1","choices":[{"index":0,"delta":{"content":" caf\xc3\xa9 \xf0\x9f\x8e\x89"},'
    b'"finish_reason":null}]}\n\n'
)
BODIES = [
    CHUNK * 3 + b"data: [DONE]\n\n",
    CHUNK.replace(b"\n", b"\r\n") * 2,
    CHUNK.replace(b"\n", b"\r") * 2,
    b": keep-alive\n\ndata:{}\r\n\r\n: ping\r\rdata: 1\ndata: 2\n\n",
    b"event: thread.message\nid: 7\nretry: 30\ndata: {}\n\nretry: x\nid: a\x00b\n\ndata\n\n",
    b"id: 9\n\n\n\ndata: after an id\n\nfield-without-colon\nunknown: x\n\n",
    b"data: no blank line at the end",
    b"data: a\r\r\n\r\ndata: b\n\r\n",
    b'data: {"x": NaN}\n\ndata: "\\ud800"\n\n',
]


def _fields(events: list[ServerSentEvent]) -> list[tuple[Any, ...]]:
    return [(e.event, e.data, e.id, e.retry) for e in events]


def _cuts(body: bytes) -> Iterator[list[bytes]]:
    yield [body]
    yield [body[i : i + 1] for i in range(len(body))]
    for i in range(len(body) + 1):
        yield [body[:i], body[i:]]


class TestSameEventsAsTheSdk:
    @pytest.mark.parametrize("body", BODIES)
    def test_every_cut_of_the_body_gives_the_sdks_events(self, body: bytes) -> None:
        expected = _fields(list(SSEDecoder().iter_bytes(iter([body]))))
        for reads in _cuts(body):
            assert _fields(list(EventStreamDecoder().iter_bytes(iter(reads)))) == expected

    @pytest.mark.parametrize("body", BODIES)
    async def test_async_reads_give_the_same_events(self, body: bytes) -> None:
        async def reads() -> AsyncIterator[bytes]:
            for i in range(0, len(body), 7):
                yield body[i : i + 7]

        expected = _fields(list(SSEDecoder().iter_bytes(iter([body]))))
        assert _fields([e async for e in EventStreamDecoder().aiter_bytes(reads())]) == expected

    @pytest.mark.parametrize("data", ['{"a": [1, 2.5, "\\u00e9"], "b": null}', "NaN", "[1e400]"])
    def test_event_json_is_the_sdks(self, data: str) -> None:
        (ours,) = EventStreamDecoder().iter_bytes(iter([f"data: {data}\n\n".encode()]))
        assert repr(ours.json()) == repr(ServerSentEvent(data=data).json())  # nan == nan

    def test_invalid_json_fails_as_the_sdks_does(self) -> None:
        (ours,) = EventStreamDecoder().iter_bytes(iter([b"data: {oops\n\n"]))
        with pytest.raises(ValueError):
            ours.json()


class TestTheSdkStreamUsesIt:
    def test_the_stream_reads_its_decoder_when_iterated(self) -> None:
        # app/agent/llm.py replaces `_decoder` on a stream the SDK built; that only works
        # while the stream reads it lazily, from `_iter_events`.
        assert "self._decoder.aiter_bytes(" in inspect.getsource(openai.AsyncStream._iter_events)
        assert "self._decoder" not in inspect.getsource(openai.AsyncStream.__stream__)

    async def test_a_stream_with_it_yields_the_chunks_and_stops_at_done(self) -> None:
        body = CHUNK + b'data: {"error": {"message": "boom"}}\n\n'
        stream = _stream(CHUNK * 2 + b"data: [DONE]\n\n")
        stream._decoder = EventStreamDecoder()
        chunks = [c async for c in stream]
        assert [c["choices"][0]["delta"]["content"] for c in chunks] == [" café 🎉"] * 2

        failing = _stream(body)
        failing._decoder = EventStreamDecoder()
        with pytest.raises(openai.APIError, match="boom"):
            _ = [c async for c in failing]


def _stream(body: bytes) -> openai.AsyncStream[Any]:
    request = httpx2.Request("POST", "http://model/v1/chat/completions")
    response = httpx2.Response(
        200, headers={"content-type": "text/event-stream"}, content=body, request=request
    )
    client = openai.AsyncOpenAI(api_key="x", base_url="http://model/v1")
    return openai.AsyncStream(cast_to=object, response=response, client=client)
