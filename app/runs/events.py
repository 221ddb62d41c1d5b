"""Translate LangGraph stream chunks into the run's stream events (app/runs/stream.py)."""

from __future__ import annotations

import uuid
from collections.abc import Iterator
from dataclasses import dataclass, field
from typing import Any

from langchain_core.messages import (
    AIMessage,
    BaseMessage,
    RemoveMessage,
    ToolMessage,
)

from app.actions.calls import OUTCOME_UNKNOWN
from app.agent.model_view import text_of
from app.agent.views import shorten
from app.runs.stream import Interrupted, StreamEvent, ToolCalled, ToolResult
from app.tools.results import artifact_of

TOOL_NODES = frozenset({"read_tools", "write_tools", "blocked"})
# A tool result's text in its event (the native `tool_result`, the LangGraph API's mid-run
# messages and `values`): whole for every tool of this shop (the largest, a product with
# its variants, is under 3,000 characters; an order about 750), cut only past this, so a
# result of unbounded size never fills a run's log. The stored message is always whole.
TOOL_EVENT_LIMIT = 8000


def _messages_in(update: Any) -> Iterator[BaseMessage]:
    """Messages in a node's update, which may be a dict, a Command's dict, or a list of those."""
    if isinstance(update, list | tuple):
        for part in update:
            yield from _messages_in(part)
        return
    if isinstance(update, dict):
        for m in update.get("messages") or []:
            if isinstance(m, BaseMessage):
                yield m
        return
    inner = getattr(update, "update", None)
    if inner is not None:
        yield from _messages_in(inner)


@dataclass
class TurnRecorder:
    """Follows one run's stream: yields events and remembers what the turn added."""

    added: dict[str, BaseMessage] = field(default_factory=dict)
    input_tokens: int = 0
    output_tokens: int = 0
    cache_hits: int = 0
    cache_misses: int = 0
    tool_errors: int = 0
    tool_oks: int = 0
    pending: list[dict[str, Any]] | None = None
    citations: list[dict[str, Any]] = field(default_factory=list)

    def on_chunk(self, mode: str, chunk: Any) -> Iterator[StreamEvent]:
        """The events of one step's updates (the answer's tokens reach the run directly:
        app/runs/executor.py `StreamedAnswer`)."""
        if mode != "updates" or not isinstance(chunk, dict):
            return
        for node, update in chunk.items():
            if node == "__interrupt__":
                for item in update:
                    value = getattr(item, "value", None)
                    if isinstance(value, dict) and "pending" in value:
                        self.pending = value["pending"]
                        yield Interrupted(pending=value["pending"])
                continue
            if node == "agent" and isinstance(update, dict):
                self._add_citations(update.get("citations") or [])
            for message in _messages_in(update):
                if isinstance(message, RemoveMessage):
                    continue  # folded into a summary; it stays in the transcript
                if message.id is None:
                    # The same object is on its way into the `messages` channel, whose
                    # reducer gives it this id rather than a new one (as LangGraph's own
                    # `messages` stream mode does), so the run's record matches the state.
                    message.id = str(uuid.uuid4())
                self.added[message.id] = message
                if node == "agent" and isinstance(message, AIMessage):
                    self._count_usage(message)
                    for call in message.tool_calls:
                        yield ToolCalled(
                            id=call["id"],
                            name=call["name"],
                            args=call["args"],
                            message_id=message.id,
                        )
                elif isinstance(message, ToolMessage) and (
                    node in TOOL_NODES or message.content == OUTCOME_UNKNOWN
                ):  # a remote write's unknown outcome, found by a repair, hands the thread off
                    self._count_cache(message)
                    if message.status == "error":
                        self.tool_errors += 1
                    else:
                        self.tool_oks += 1
                    yield ToolResult(
                        id=message.tool_call_id,
                        name=message.name,
                        status="error" if message.status == "error" else "ok",
                        content=shorten(text_of(message), TOOL_EVENT_LIMIT),
                        message_id=message.id,
                    )

    def _add_citations(self, cited: list[Any]) -> None:
        seen = {c["id"] for c in self.citations}
        for c in cited:
            if isinstance(c, dict) and c.get("id") not in seen:
                self.citations.append(dict(c))
                seen.add(c.get("id"))

    def _count_usage(self, message: AIMessage) -> None:
        usage = message.usage_metadata
        if usage:
            self.input_tokens += int(usage.get("input_tokens", 0))
            self.output_tokens += int(usage.get("output_tokens", 0))

    def _count_cache(self, message: ToolMessage) -> None:
        marker = artifact_of(message).get("cache")
        self.cache_hits += marker == "hit"
        self.cache_misses += marker == "miss"

    @property
    def usage(self) -> dict[str, int]:
        return {
            "input_tokens": self.input_tokens,
            "output_tokens": self.output_tokens,
            "cache_hits": self.cache_hits,
            "cache_misses": self.cache_misses,
        }
