"""A run's events (app/runs/stream.py) as the Platform's SSE events.

`metadata` first (the run id), `values` after each step, `messages` (the
`messages-tuple` mode: `[chunk, metadata]`) for each piece of the answer and each tool
result, `messages/metadata` + `messages/partial` | `messages/complete` (the `messages`
mode: the message so far, as the official server accumulates it), `updates` per step,
`tools` (`on_tool_start`, `on_tool_end`, `on_tool_error`), `custom` for cs-agent's own
events (tool calls and results, citations), `error` on failure; a pending confirmation is
`__interrupt__` in the last `values` (and `updates`) event. Nothing here runs for the
native routes.

Every message has one id from its first piece to the final state: the id the run's
events carry (app/runs/events.py), which is the one the message is stored under.

Values between steps are built from what the run recorded (the transcript it started
from, its message, the tool calls and results as they came) rather than read back: a run
holds its checkpoints until it ends (app/db/checkpointer.py). The last `values` is the
state the run stored, read once at its end.

Event ids are `{seq}-{k}`: the k-th Platform event made from the run's event `seq`. The
translation is a function of the run's log alone (its start and end read from their
checkpoints), so a client that rejoins with `Last-Event-ID` gets the rest, in the same
order and with the same ids, on any replica.
"""

from __future__ import annotations

import json
from collections.abc import Iterable
from dataclasses import dataclass, field
from typing import Any

from app.api.lg.views import ASSISTANT_ID, GRAPH_ID, hitl_value
from app.runs.stream import (
    Citations,
    Done,
    Interrupted,
    RunFailed,
    RunStarted,
    StreamEvent,
    Token,
    ToolCalled,
    ToolResult,
)

MODES = frozenset({"values", "messages-tuple", "messages", "updates", "custom", "tools"})
EventId = tuple[int, int]
PlatformEvent = tuple[int, int, str, Any]  # (seq, k, event name, data)
EVERYTHING: EventId = (0, -1)


def parse_event_id(header: str | None) -> EventId | None:
    """`Last-Event-ID`: None when absent (only new events); "-1" or anything this service
    did not send means from the start, as the official server's replay does."""
    if header is None or not header.strip():
        return None
    seq, _, k = header.strip().partition("-")
    try:
        return (int(seq), int(k) if k else 1 << 30)
    except ValueError:
        return EVERYTHING


def event_id(seq: int, k: int) -> str:
    return f"{seq}-{k}"


@dataclass
class Final:
    """The state the run ended on: its values and the interrupts waiting in it."""

    values: dict[str, Any]
    interrupts: list[dict[str, Any]] = field(default_factory=list)


def _chunk(message_id: str, text: str) -> dict[str, Any]:
    return {
        "content": text,
        "additional_kwargs": {},
        "response_metadata": {},
        "type": "AIMessageChunk",
        "name": None,
        "id": message_id,
        "tool_calls": [],
        "invalid_tool_calls": [],
        "usage_metadata": None,
        "tool_call_chunks": [],
        "chunk_position": None,
    }


def _whole(message: dict[str, Any]) -> dict[str, Any]:
    """A message as the `messages` mode sends it (`message_chunk_to_message` of the
    chunks so far): a copy, as later pieces change the one being built."""
    return {**message, "tool_calls": list(message.get("tool_calls") or [])}


def _calls_chunk(message: dict[str, Any]) -> dict[str, Any]:
    """The tool calls of an answer as the last chunk of its stream (as a streaming model
    sends them): clients merge it into the text already shown, by message id."""
    chunk = _chunk(message["id"], "")
    chunk["tool_calls"] = message["tool_calls"]
    chunk["tool_call_chunks"] = [
        {
            "name": call["name"],
            "args": json.dumps(call["args"]),
            "id": call["id"],
            "index": index,
            "type": "tool_call_chunk",
        }
        for index, call in enumerate(message["tool_calls"])
    ]
    return chunk


@dataclass
class Translator:
    run_id: str
    session_id: str
    base: list[dict[str, Any]]  # the transcript the run started from
    human: dict[str, Any] | None  # the message that opened the turn, when one did
    write_names: frozenset[str] = frozenset()
    messages: list[dict[str, Any]] = field(default_factory=list)
    ai: dict[str, Any] | None = None
    tools: list[dict[str, Any]] = field(default_factory=list)
    step: int = 1
    ai_count: int = 0
    failed: bool = False
    calls: dict[str, tuple[str, dict[str, Any]]] = field(default_factory=dict)
    started: set[str] = field(default_factory=set)  # tool calls whose start was sent

    def feed(self, event: StreamEvent, final: Final | None = None) -> list[tuple[str, Any]]:
        """The Platform events one run event makes, in order (all modes; the caller
        keeps the requested ones). `final` is needed for `done` only."""
        out: list[tuple[str, Any]] = []
        if isinstance(event, RunStarted):
            out.append(("metadata", {"run_id": self.run_id, "attempt": 1}))
            self.messages = [*self.base, *([self.human] if self.human else [])]
            out.append(("values", {"messages": list(self.messages)}))
        elif isinstance(event, Token):
            if self.tools:
                self._close_tools(out)
            ai = self._current_ai(event.message_id, out)
            ai["content"] += event.text
            out.append(("messages", [_chunk(ai["id"], event.text), self._meta("agent")]))
            out.append(("messages/partial", [_whole(ai)]))
        elif isinstance(event, ToolCalled):
            if self.tools:
                self._close_tools(out)
            self._current_ai(event.message_id, out)["tool_calls"].append(
                {"name": event.name, "args": event.args, "id": event.id, "type": "tool_call"}
            )
            self.calls[event.id or ""] = (event.name, event.args)
            if event.name not in self.write_names:  # a write starts once it is confirmed
                out.append(("tools", self._tool_started(event.id, event.name, event.args)))
            out.append(("custom", {"type": "tool_call", **_custom(event)}))
        elif isinstance(event, ToolResult):
            if self.ai is not None:
                self._close_ai(out)
            message = self._tool_message(event)
            self.tools.append(message)
            meta = self._meta(self._tool_node())
            out.append(("messages", [message, meta]))
            out.append(("messages/metadata", {message["id"]: {"metadata": meta}}))
            out.append(("messages/complete", [message]))
            out.extend(("tools", data) for data in self._tool_ended(event, message))
            out.append(("custom", {"type": "tool_result", **_custom(event)}))
        elif isinstance(event, Interrupted):
            if self.ai is not None:  # the state it paused in is the last `values`
                self._close_ai(out, values=False)
        elif isinstance(event, Citations):
            out.append(("custom", {"type": "citations", "citations": event.citations}))
        elif isinstance(event, RunFailed):
            self.failed = True
            out.append(("error", {"error": event.code, "message": event.message}))
        elif isinstance(event, Done):
            self._finish(out, final)
        return out

    def _finish(self, out: list[tuple[str, Any]], final: Final | None) -> None:
        if self.failed or final is None:
            return
        if self.ai is not None:
            self._close_ai(out, values=False)
        elif self.tools:
            self._close_tools(out, values=False)
        out.append(("values", final.values))
        if final.interrupts:
            out.append(("updates", {"__interrupt__": final.interrupts}))
            out.append(("values", {**final.values, "__interrupt__": final.interrupts}))

    def _current_ai(self, message_id: str | None, out: list[tuple[str, Any]]) -> dict[str, Any]:
        """The answer being streamed: the one with `message_id` (a new id closes the one
        before). Logs written before events carried ids get a stand-in."""
        if self.ai is not None and message_id is not None and self.ai["id"] != message_id:
            self._close_ai(out)
        if self.ai is None:
            self.ai_count += 1
            message_id = message_id or f"run-{self.run_id}-{self.ai_count}"
            out.append(("messages/metadata", {message_id: {"metadata": self._meta("agent")}}))
            self.ai = {
                "type": "ai",
                "id": message_id,
                "content": "",
                "name": None,
                "additional_kwargs": {},
                "response_metadata": {},
                "tool_calls": [],
                "invalid_tool_calls": [],
                "usage_metadata": None,
            }
        return self.ai

    def _close_ai(self, out: list[tuple[str, Any]], *, values: bool = True) -> None:
        assert self.ai is not None
        message, self.ai = self.ai, None
        self.messages.append(message)
        if message["tool_calls"]:
            out.append(("messages", [_calls_chunk(message), self._meta("agent")]))
            out.append(("messages/partial", [_whole(message)]))
        out.append(("updates", {"agent": {"messages": [message]}}))
        if values:
            out.append(("values", {"messages": list(self.messages)}))
        self.step += 1

    def _close_tools(self, out: list[tuple[str, Any]], *, values: bool = True) -> None:
        node = self._tool_node()
        tools, self.tools = self.tools, []
        self.messages.extend(tools)
        out.append(("updates", {node: {"messages": tools}}))
        if values:
            out.append(("values", {"messages": list(self.messages)}))
        self.step += 1

    def _tool_node(self) -> str:
        names = {t["name"] for t in self.tools}
        return "write_tools" if names and names <= self.write_names else "read_tools"

    def _tool_started(self, call_id: str | None, name: str, args: dict[str, Any]) -> dict[str, Any]:
        self.started.add(call_id or "")
        return {"event": "on_tool_start", "toolCallId": call_id, "name": name, "input": args}

    def _tool_ended(self, event: ToolResult, message: dict[str, Any]) -> list[dict[str, Any]]:
        """`on_tool_start` for a call that did not show its start (a confirmed write, or
        a call made in the run before), then how it ended."""
        out: list[dict[str, Any]] = []
        call_id = event.id or ""
        name = event.name or ""
        if call_id not in self.started:
            _, args = self.calls.get(call_id) or self._earlier_call(call_id)
            out.append(self._tool_started(event.id, name, args))
        if event.status == "error":
            end = {"event": "on_tool_error", "toolCallId": event.id, "name": name}
            out.append({**end, "error": event.content})
        else:
            out.append({"event": "on_tool_end", "toolCallId": event.id, "name": name})
            out[-1]["output"] = message
        return out

    def _earlier_call(self, call_id: str) -> tuple[str, dict[str, Any]]:
        for m in reversed(self.base):
            for call in m.get("tool_calls") or []:
                if call.get("id") == call_id:
                    return str(call.get("name")), dict(call.get("args") or {})
        return "", {}

    def _tool_message(self, event: ToolResult) -> dict[str, Any]:
        return {
            "type": "tool",
            "id": event.message_id or f"run-{self.run_id}-tool-{event.id}",
            "content": event.content,
            "name": event.name,
            "tool_call_id": event.id or "",
            "status": "error" if event.status == "error" else "success",
            "artifact": None,
            "additional_kwargs": {},
            "response_metadata": {},
        }

    def _meta(self, node: str) -> dict[str, Any]:
        return {
            "run_id": self.run_id,
            "thread_id": self.session_id,
            "assistant_id": ASSISTANT_ID,
            "graph_id": GRAPH_ID,
            "langgraph_step": self.step,
            "langgraph_node": node,
            "langgraph_path": ["__pregel_pull", node],
        }


_MODE_OF = {
    "messages": "messages-tuple",
    "messages/metadata": "messages",
    "messages/partial": "messages",
    "messages/complete": "messages",
}
_EXCLUDED = {"event", "message_id"}


def _custom(event: ToolCalled | ToolResult) -> dict[str, Any]:
    return event.model_dump(exclude=_EXCLUDED)


def wanted(name: str, modes: frozenset[str]) -> bool:
    """`metadata` and `error` always go out; the rest by stream mode."""
    if name in ("metadata", "error"):
        return True
    return _MODE_OF.get(name, name) in modes


def interrupts_of(values: Iterable[Any]) -> list[dict[str, Any]]:
    return [{"value": hitl_value(i.value), "id": i.id, "response_schema": None} for i in values]


def _text_chunk(event: PlatformEvent) -> str | None:
    """The message id of a `messages-tuple` piece of answer text, else None."""
    if event[2] != "messages":
        return None
    chunk = event[3][0]
    if chunk.get("type") != "AIMessageChunk" or chunk["tool_call_chunks"]:
        return None
    return str(chunk["id"])


def _partial(event: PlatformEvent) -> str | None:
    return str(event[3][0]["id"]) if event[2] == "messages/partial" else None


def merged(events: list[PlatformEvent]) -> list[PlatformEvent]:
    """Adjacent pieces of one answer as one chunk under the id of the last, and of its
    `messages/partial`s the last (each holds the whole message so far): fewer frames, the
    same text, and a client resuming after an id has every piece before it. With both
    modes the two alternate; a partial between two pieces is dropped, since the one
    after the second piece follows it."""
    out: list[PlatformEvent] = []
    for event in events:
        seq, k, name, data = event
        if (piece := _text_chunk(event)) is not None:
            if len(out) > 1 and _partial(out[-1]) == piece and _text_chunk(out[-2]) == piece:
                out.pop()
            if out and _text_chunk(out[-1]) == piece:
                prev = out[-1][3]
                chunk = {**prev[0], "content": prev[0]["content"] + data[0]["content"]}
                out[-1] = (seq, k, name, [chunk, data[1]])
                continue
        elif (whole := _partial(event)) is not None and out and _partial(out[-1]) == whole:
            out[-1] = event
            continue
        out.append(event)
    return out
