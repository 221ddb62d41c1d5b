"""The model's streamed reply (server-sent events), decoded for the openai SDK's stream.

The SDK's `SSEDecoder` splits each read into lines with a regular expression through a
growing bytearray and decodes every line as text, and its events parse their JSON with
`json`: about 10 us of a chunk's CPU, a chunk per token. `EventStreamDecoder` yields the same
events (the same fields and line ends: CRLF, LF or CR, a CR and its LF split across reads
too) for about a fifth of that; the SDK's stream keeps everything else (`[DONE]`, errors
in the data, its typed errors for a broken connection). tests/unit/test_sse_decoder.py
compares the two decoders on the same bytes cut at every place.
"""

from __future__ import annotations

import contextlib
import json
from collections.abc import AsyncIterator, Iterator
from typing import Any

import orjson
from openai._streaming import ServerSentEvent


class _Event(ServerSentEvent):
    def json(self) -> Any:
        try:
            return orjson.loads(self.data)
        except orjson.JSONDecodeError:  # what orjson refuses (NaN, a lone surrogate, ...)
            return json.loads(self.data)  # parses as the SDK would, or fails as it would


class EventStreamDecoder:
    """An `openai._streaming.SSEBytesDecoder`, for one stream."""

    def __init__(self) -> None:
        self._pending = b""  # the unfinished line of the reads so far
        self._skip_lf = False  # the last read ended with CR: a LF opening the next is its end
        self._event: str | None = None
        self._data: list[str] = []
        self._last_event_id: str | None = None
        self._retry: int | None = None

    def iter_bytes(self, iterator: Iterator[bytes]) -> Iterator[ServerSentEvent]:
        for chunk in iterator:
            yield from self._events(self._lines(chunk))
        yield from self._events(self._rest())

    async def aiter_bytes(self, iterator: AsyncIterator[bytes]) -> AsyncIterator[ServerSentEvent]:
        async for chunk in iterator:
            for sse in self._events(self._lines(chunk)):
                yield sse
        for sse in self._events(self._rest()):
            yield sse

    def _lines(self, chunk: bytes) -> list[bytes]:
        if not chunk:
            return []
        if self._skip_lf and chunk[0] == 10:
            chunk = chunk[1:]
        self._skip_lf = False
        data = self._pending + chunk if self._pending else chunk
        if b"\r" in data:
            self._skip_lf = data.endswith(b"\r")
            data = data.replace(b"\r\n", b"\n").replace(b"\r", b"\n")
        lines = data.split(b"\n")
        self._pending = lines.pop()
        return lines

    def _rest(self) -> list[bytes]:
        rest, self._pending = self._pending, b""
        return [rest] if rest else []

    def _events(self, lines: list[bytes]) -> Iterator[ServerSentEvent]:
        for line in lines:
            if line.startswith(b"data:"):  # every line of a chat completion but the blank
                value = line[6:] if line.startswith(b"data: ") else line[5:]
                self._data.append(value.decode("utf-8"))
            elif sse := self._decode(line.decode("utf-8")):
                yield sse

    def _decode(self, line: str) -> ServerSentEvent | None:
        """The SDK's `SSEDecoder.decode`, for a line of any other kind."""
        if not line:
            if (
                not self._event
                and not self._data
                and not self._last_event_id
                and self._retry is None
            ):
                return None
            sse = _Event(
                event=self._event,
                data="\n".join(self._data),
                id=self._last_event_id,
                retry=self._retry,
            )
            self._event = None  # the last event id is kept, as the SSE spec says
            self._data = []
            self._retry = None
            return sse
        if line.startswith(":"):
            return None
        field, _, value = line.partition(":")
        if value.startswith(" "):
            value = value[1:]
        if field == "event":
            self._event = value
        elif field == "data":
            self._data.append(value)
        elif field == "id":
            if "\0" not in value:
                self._last_event_id = value
        elif field == "retry":
            with contextlib.suppress(TypeError, ValueError):
                self._retry = int(value)
        return None
