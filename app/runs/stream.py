"""The events of a run's stream: one discriminated union of models, one encoder.

The run emits them (app/runs/events.py, app/runs/service.py), the SSE response and the
replay of a finished run encode them with `frame`, and the OpenAPI document describes them
(`STREAM_SCHEMA`). On the wire an event is `id: <seq>`, `event: <name>` and its fields as
JSON, without the `event` field itself.
"""

from __future__ import annotations

from collections.abc import Sequence
from typing import Annotated, Any, Literal

import orjson
from pydantic import BaseModel, Field, TypeAdapter


class RunStarted(BaseModel):
    """First: which run this is and the checkpoint it starts from."""

    event: Literal["run"] = "run"
    run_id: str
    thread_id: str
    checkpoint_id: str | None = None


class Token(BaseModel):
    """The next piece of the answer (one model token, or adjacent ones merged).
    `message_id` is the id the answer is stored under, fixed at its first token."""

    event: Literal["token"] = "token"
    text: str
    message_id: str | None = None  # None only in logs written before it existed


class ToolCalled(BaseModel):
    event: Literal["tool_call"] = "tool_call"
    id: str | None
    name: str
    args: dict[str, Any]
    message_id: str | None = None  # the answer that makes the call


class ToolResult(BaseModel):
    event: Literal["tool_result"] = "tool_result"
    id: str | None
    name: str | None
    status: Literal["ok", "error"]
    content: str
    message_id: str | None = None  # the tool message's stored id


class Interrupted(BaseModel):
    """The run paused before writes that wait for the customer's confirmation."""

    event: Literal["interrupt"] = "interrupt"
    pending: list[dict[str, Any]]


class Citations(BaseModel):
    """The help articles a completed answer drew on."""

    event: Literal["citations"] = "citations"
    citations: list[dict[str, Any]]


class Stored(BaseModel):
    """A person holds the thread: the message was stored for them, and no run started."""

    event: Literal["stored"] = "stored"
    message: dict[str, Any]
    control: dict[str, Any]


class RunFailed(BaseModel):
    """Why the run did not complete; always followed by `done`."""

    event: Literal["error"] = "error"
    code: str
    message: str


class Done(BaseModel):
    """Always last."""

    event: Literal["done"] = "done"
    status: str
    checkpoint_id: str | None = None
    usage: dict[str, int] = Field(default_factory=dict)


StreamEvent = Annotated[
    RunStarted
    | Token
    | ToolCalled
    | ToolResult
    | Interrupted
    | Citations
    | Stored
    | RunFailed
    | Done,
    Field(discriminator="event"),
]
Sequenced = tuple[int, StreamEvent]  # (id within the run, event)

_ADAPTER: TypeAdapter[StreamEvent] = TypeAdapter(StreamEvent)
STREAM_SCHEMA: dict[str, Any] = _ADAPTER.json_schema()
_WIRE_EXCLUDE = {"event"}


_WIRE_EXCLUDE_NO_ID = {"event", "message_id"}


def _exclude(event: StreamEvent) -> set[str]:
    """`message_id` is left out when there is none (an event of no message, or of a log
    written before events carried it)."""
    has_id = getattr(event, "message_id", None) is not None
    return _WIRE_EXCLUDE if has_id else _WIRE_EXCLUDE_NO_ID


def data_of(event: StreamEvent) -> bytes:
    """The event's fields as JSON, as its `data:` line carries them."""
    if type(event) is Token and event.message_id is not None:
        # One per model chunk: orjson writes the same bytes as pydantic (a unit test
        # compares them) in a fifth of the time. Text orjson refuses (a lone surrogate)
        # is left to pydantic.
        try:
            return orjson.dumps({"text": event.text, "message_id": event.message_id})
        except TypeError:
            pass
    return event.model_dump_json(exclude=_exclude(event), fallback=str).encode()


def sse_frame(
    event: str, data: bytes, id: str | int | None = None, *, id_last: bool = False
) -> bytes:
    """One frame of a text/event-stream, the only place one is written: its `id`, `event`
    and `data` lines, ended with CRLF as sse-starlette ends its pings, and a blank line.
    `data` is one line (JSON, whose newlines are escaped). The /lg stream writes its id
    last (`id_last`), as it always has. One format per shape: this runs once a frame."""
    if id is None:
        return b"event: %s\r\ndata: %s\r\n\r\n" % (event.encode(), data)
    if id_last:
        return b"event: %s\r\ndata: %s\r\nid: %s\r\n\r\n" % (event.encode(), data, _id(id))
    return b"id: %s\r\nevent: %s\r\ndata: %s\r\n\r\n" % (_id(id), event.encode(), data)


def _id(id: str | int) -> bytes:
    return b"%d" % id if type(id) is int else str(id).encode()


def frame(seq: int, event: StreamEvent) -> bytes:
    return sse_frame(event.event, data_of(event), seq)


def joined(last: StreamEvent, event: StreamEvent) -> Token | None:
    """`event` merged into `last` when both are tokens of one message, else None: the
    one rule of merging, for the run's log (`Run.emit`) and a batch's frames alike."""
    if isinstance(event, Token) and isinstance(last, Token) and last.message_id == event.message_id:
        return Token(text=last.text + event.text, message_id=event.message_id)
    return None


def merged_tokens(batch: Sequence[Sequenced]) -> list[Sequenced]:
    """Adjacent tokens of one message as one, under the id of the last: the text is the
    same, the frames fewer, and a client resuming after that id has seen every piece."""
    out: list[Sequenced] = []
    for seq, event in batch:
        if out and (merged := joined(out[-1][1], event)) is not None:
            out[-1] = (seq, merged)
        else:
            out.append((seq, event))
    return out


def to_record(seq: int, event: StreamEvent) -> list[Any]:
    """One event of a stored log: [seq, event, data]."""
    return [seq, event.event, event.model_dump(exclude=_exclude(event), mode="json", fallback=str)]


def from_record(record: Sequence[Any]) -> Sequenced:
    seq, name, data = record
    return int(seq), _ADAPTER.validate_python({**data, "event": name})
