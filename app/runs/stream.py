"""The events of a run's stream: one discriminated union of models, one encoder.

The run emits them (app/runs/events.py, app/runs/service.py), the SSE response and the
replay of a finished run encode them with `frame`, and the OpenAPI document describes them
(`STREAM_SCHEMA`). On the wire an event is `id: <seq>`, `event: <name>` and its fields as
JSON, without the `event` field itself.
"""

from __future__ import annotations

from collections.abc import Sequence
from typing import Annotated, Any, Literal

from pydantic import BaseModel, Field, TypeAdapter


class RunStarted(BaseModel):
    """First: which run this is and the checkpoint it starts from."""

    event: Literal["run"] = "run"
    run_id: str
    thread_id: str
    checkpoint_id: str | None = None


class Token(BaseModel):
    """The next piece of the answer (one model token, or adjacent ones merged)."""

    event: Literal["token"] = "token"
    text: str


class ToolCalled(BaseModel):
    event: Literal["tool_call"] = "tool_call"
    id: str | None
    name: str
    args: dict[str, Any]


class ToolResult(BaseModel):
    event: Literal["tool_result"] = "tool_result"
    id: str | None
    name: str | None
    status: Literal["ok", "error"]
    content: str


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


def data_of(event: StreamEvent) -> bytes:
    """The event's fields as JSON, as its `data:` line carries them."""
    return event.model_dump_json(exclude=_WIRE_EXCLUDE, fallback=str).encode()


def frame(seq: int, event: StreamEvent) -> bytes:
    return b"id: %d\r\nevent: %s\r\ndata: %s\r\n\r\n" % (seq, event.event.encode(), data_of(event))


def merged_tokens(batch: Sequence[Sequenced]) -> list[Sequenced]:
    """Adjacent tokens as one, under the id of the last: the text is the same, the frames
    fewer, and a client resuming after that id has seen every piece of it."""
    out: list[Sequenced] = []
    for seq, event in batch:
        if isinstance(event, Token) and out and isinstance(out[-1][1], Token):
            out[-1] = (seq, Token(text=out[-1][1].text + event.text))
        else:
            out.append((seq, event))
    return out


def to_record(seq: int, event: StreamEvent) -> list[Any]:
    """One event of a stored log: [seq, event, data]."""
    return [seq, event.event, event.model_dump(exclude=_WIRE_EXCLUDE, mode="json", fallback=str)]


def from_record(record: Sequence[Any]) -> Sequenced:
    seq, name, data = record
    return int(seq), _ADAPTER.validate_python({**data, "event": name})
