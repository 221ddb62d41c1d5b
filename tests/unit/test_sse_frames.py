"""Every SSE stream is written by one encoder (`app.runs.stream.sse_frame`): the run's
stream, the /lg stream and the thread's feed. The bytes below are what each wrote with its
own encoder before there was one; a change of the wire shows up here first."""

from __future__ import annotations

from app.api.lg.runs import _frame
from app.api.routes.staff import feed_frame
from app.runs.stream import Done, RunStarted, Token, ToolCalled, frame, sse_frame


def test_the_run_stream_writes_id_event_and_data() -> None:
    assert frame(7, Token(text="héllo", message_id="m1")) == (
        b'id: 7\r\nevent: token\r\ndata: {"text":"h\xc3\xa9llo","message_id":"m1"}\r\n\r\n'
    )
    assert frame(8, Token(text="x\ny\r\n\u2028")) == (
        b'id: 8\r\nevent: token\r\ndata: {"text":"x\\ny\\r\\n\xe2\x80\xa8"}\r\n\r\n'
    )
    assert frame(1, RunStarted(run_id="r", thread_id="u:s")) == (
        b'id: 1\r\nevent: run\r\ndata: {"run_id":"r","thread_id":"u:s","checkpoint_id":null}'
        b"\r\n\r\n"
    )
    call = ToolCalled(id="c1", name="get_order", args={"order_id": "#W1"}, message_id="m2")
    assert frame(12, call) == (
        b'id: 12\r\nevent: tool_call\r\ndata: {"id":"c1","name":"get_order",'
        b'"args":{"order_id":"#W1"},"message_id":"m2"}\r\n\r\n'
    )
    assert frame(99, Done(status="completed", usage={"input_tokens": 3})) == (
        b'id: 99\r\nevent: done\r\ndata: {"status":"completed","checkpoint_id":null,'
        b'"usage":{"input_tokens":3}}\r\n\r\n'
    )


def test_the_lg_stream_writes_its_id_last_and_only_when_asked() -> None:
    assert _frame((3, 0, "messages", [{"content": "hé"}, {"m": 1}]), True) == (
        b'event: messages\r\ndata: [{"content":"h\xc3\xa9"},{"m":1}]\r\nid: 3-0\r\n\r\n'
    )
    assert _frame((3, 2, "values", {"messages": []}), False) == (
        b'event: values\r\ndata: {"messages":[]}\r\n\r\n'
    )
    assert _frame((4, 1, "end", None), True) == b"event: end\r\ndata: null\r\nid: 4-1\r\n\r\n"


def test_the_thread_feed_writes_what_sse_starlette_wrote_for_its_dicts() -> None:
    row = {"id": 41, "kind": "message", "data": {"text": "héllo\n👋", "n": [1, 2]}}
    assert feed_frame(row) == (
        b'id: 41\r\nevent: message\r\ndata: {"text": "h\\u00e9llo\\n\\ud83d\\udc4b", "n": [1, 2]}'
        b"\r\n\r\n"
    )
    assert feed_frame({"id": 42, "kind": "control", "data": None}) == (
        b"id: 42\r\nevent: control\r\ndata: null\r\n\r\n"
    )


def test_an_id_is_written_the_same_given_as_a_number_or_as_text() -> None:
    assert sse_frame("e", b"{}", 5) == sse_frame("e", b"{}", "5")
    assert sse_frame("e", b"{}", 5, id_last=True) == b"event: e\r\ndata: {}\r\nid: 5\r\n\r\n"
