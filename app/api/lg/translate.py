"""A run's events (app/runs/stream.py) as the Platform's SSE events.

`metadata` first (the run id), `values` after each step, `messages` (the
`messages-tuple` mode: `[chunk, metadata]`) for each piece of the answer and each tool
result, `updates` per step, `custom` for cs-agent's own events (tool calls and results,
citations), `error` on failure; a pending confirmation is `__interrupt__` in the last
`values` (and `updates`) event. Nothing here runs for the native routes.

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

MODES = frozenset({"values", "messages-tuple", "updates", "custom"})
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
            ai = self._current_ai()
            ai["content"] += event.text
            out.append(("messages", [_chunk(ai["id"], event.text), self._meta("agent")]))
        elif isinstance(event, ToolCalled):
            if self.tools:
                self._close_tools(out)
            self._current_ai()["tool_calls"].append(
                {"name": event.name, "args": event.args, "id": event.id, "type": "tool_call"}
            )
            out.append(("custom", {"type": "tool_call", **event.model_dump(exclude={"event"})}))
        elif isinstance(event, ToolResult):
            if self.ai is not None:
                self._close_ai(out)
            message = self._tool_message(event)
            self.tools.append(message)
            out.append(("messages", [message, self._meta(self._tool_node())]))
            out.append(("custom", {"type": "tool_result", **event.model_dump(exclude={"event"})}))
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

    def _current_ai(self) -> dict[str, Any]:
        if self.ai is None:
            self.ai_count += 1
            self.ai = {
                "type": "ai",
                "id": f"run-{self.run_id}-{self.ai_count}",
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

    def _tool_message(self, event: ToolResult) -> dict[str, Any]:
        return {
            "type": "tool",
            "id": f"run-{self.run_id}-tool-{event.id}",
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


_MODE_OF = {"messages": "messages-tuple"}


def wanted(name: str, modes: frozenset[str]) -> bool:
    """`metadata` and `error` always go out; the rest by stream mode."""
    if name in ("metadata", "error"):
        return True
    return _MODE_OF.get(name, name) in modes


def interrupts_of(values: Iterable[Any]) -> list[dict[str, Any]]:
    return [{"value": hitl_value(i.value), "id": i.id, "response_schema": None} for i in values]


def merged(events: list[PlatformEvent]) -> list[PlatformEvent]:
    """Adjacent pieces of one answer as one chunk under the id of the last: fewer frames,
    the same text, and a client resuming after that id has every piece of it."""
    out: list[PlatformEvent] = []
    for event in events:
        seq, k, name, data = event
        if name == "messages" and out and out[-1][2] == "messages":
            prev = out[-1][3]
            if (
                prev[0].get("type") == "AIMessageChunk"
                and data[0].get("type") == "AIMessageChunk"
                and prev[0]["id"] == data[0]["id"]
                and not prev[0]["tool_call_chunks"]
                and not data[0]["tool_call_chunks"]
            ):
                chunk = {**prev[0], "content": prev[0]["content"] + data[0]["content"]}
                out[-1] = (seq, k, name, [chunk, data[1]])
                continue
        out.append(event)
    return out
