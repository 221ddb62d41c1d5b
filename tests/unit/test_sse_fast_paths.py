"""The per-token shortcuts of the SSE path write what the general path would."""

from __future__ import annotations

import inspect
from typing import Any

import pytest
from pydantic_core import PydanticSerializationError
from sse_starlette.sse import EventSourceResponse

from app.api.sse import _EventSource, sse_response
from app.runs.stream import Token, data_of

TEXTS = [
    " hello",
    "",
    'quote " backslash \\ slash / </script>',
    "new\nline\ttab\rcr\bbs\fff",
    "control \x00 \x01 \x1f \x7f",
    "café ünïcode 日本語 emoji 🎉",
    "\u2028 \u2029 line separators",
]


class TestTokenData:
    @pytest.mark.parametrize("text", TEXTS)
    def test_a_token_is_written_as_pydantic_writes_it(self, text: str) -> None:
        token = Token(text=text, message_id="lc_run--1f0")
        general = token.model_dump_json(exclude={"event"}, fallback=str).encode()
        assert data_of(token) == general

    def test_text_neither_encoder_takes_fails_as_before(self) -> None:
        with pytest.raises(PydanticSerializationError):
            data_of(Token(text="lone \ud800 surrogate", message_id="lc_run--1f0"))

    def test_a_token_without_a_message_id_leaves_the_field_out(self) -> None:
        assert data_of(Token(text="hi")) == b'{"text":"hi"}'


class TestEventSource:
    def test_upstream_still_sends_every_frame_through_the_overridden_method(self) -> None:
        # _EventSource overrides this internal; if sse-starlette renames it or stops
        # calling it, the override would silently do nothing.
        upstream = inspect.getsource(EventSourceResponse._stream_response)
        assert "self._send_with_timeout(" in upstream
        params = list(inspect.signature(EventSourceResponse._send_with_timeout).parameters)
        assert params == ["self", "send", "message"]
        response = sse_response(_no_batches(), 15)
        assert isinstance(response, _EventSource) and response.send_timeout is None

    async def test_without_a_send_timeout_a_frame_is_sent_as_is(self) -> None:
        sent: list[Any] = []

        async def send(message: Any) -> None:
            sent.append(message)

        response = sse_response(_no_batches(), 15)
        message = {"type": "http.response.body", "body": b"x", "more_body": True}
        await response._send_with_timeout(send, message)
        assert sent == [message]


async def _no_batches() -> Any:
    return
    yield
