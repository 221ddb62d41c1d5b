"""What a policy sees (`ChatRequest`) and what it answers (`Reply`).

Both extend the demo model's own types (app/demo/chat.py), so a scripted test and the demo
policy read a conversation the same way: here a request also keeps its HTTP body and
headers, and a reply can be paced or broken on purpose.
"""

from __future__ import annotations

import json
from collections.abc import Mapping
from dataclasses import dataclass, field
from typing import Any, Literal, Protocol

from app.demo import chat
from app.demo.chat import JSONDict, ToolCall, content_text

__all__ = [
    "ChatRequest",
    "Fault",
    "JSONDict",
    "Latency",
    "Policy",
    "Reply",
    "StreamFault",
    "ToolCall",
    "ToolResult",
    "content_text",
]


@dataclass(frozen=True)
class ChatRequest(chat.ChatRequest):
    """One parsed POST /v1/chat/completions body, as the model would have seen it."""

    stream: bool = False
    include_usage: bool = False
    body: JSONDict = field(default_factory=dict)
    headers: dict[str, str] = field(default_factory=dict)

    @classmethod
    def from_body(cls, body: JSONDict, headers: Mapping[str, str] | None = None) -> ChatRequest:
        messages = body.get("messages")
        if not isinstance(messages, list) or not all(isinstance(m, dict) for m in messages):
            raise ValueError("'messages' must be a list of objects")
        tools = body.get("tools") or []
        if not isinstance(tools, list):
            raise ValueError("'tools' must be a list")
        stream_options = body.get("stream_options") or {}
        return cls(
            messages=messages,
            tools=tools,
            model=str(body.get("model", "")),
            stream=bool(body.get("stream", False)),
            include_usage=bool(stream_options.get("include_usage", False)),
            body=body,
            headers=dict(headers or {}),
        )

    def user_texts(self) -> list[str]:
        return [content_text(m) for m in self.messages if m.get("role") == "user"]

    def first_user_text(self) -> str:
        texts = self.user_texts()
        return texts[0] if texts else ""

    def last_user_text(self) -> str:
        texts = self.user_texts()
        return texts[-1] if texts else ""

    def pending_tool_results(self) -> list[ToolResult]:
        """Tool messages that answer the assistant's latest tool calls (empty if none)."""
        results: list[ToolResult] = []
        for message in reversed(self.messages):
            if message.get("role") != "tool":
                break
            results.append(ToolResult.from_message(message, self._call_names()))
        results.reverse()
        return results

    def _call_names(self) -> dict[str, str]:
        names: dict[str, str] = {}
        for message in self.messages:
            for call in message.get("tool_calls") or []:
                names[str(call.get("id"))] = str(call.get("function", {}).get("name", ""))
        return names


@dataclass(frozen=True)
class ToolResult:
    """A role "tool" message: the content is JSON on success and "Error: ..." on failure."""

    tool_call_id: str
    name: str
    content: str

    @classmethod
    def from_message(cls, message: JSONDict, call_names: Mapping[str, str]) -> ToolResult:
        call_id = str(message.get("tool_call_id", ""))
        return cls(call_id, call_names.get(call_id, ""), content_text(message))

    @property
    def is_error(self) -> bool:
        return self.content.startswith("Error:")

    def json(self) -> Any:
        """The parsed content, or None when it is not JSON."""
        try:
            return json.loads(self.content)
        except ValueError:
            return None


@dataclass(frozen=True)
class Fault:
    """An HTTP error answered instead of a completion, with an OpenAI-style error body."""

    status: int
    message: str
    type: str
    code: str | None = None
    # Sent as `retry-after-ms`, so clients that honour it retry quickly in tests.
    retry_after_s: float | None = 0.01
    # Sent as `x-should-retry`, which the openai SDK obeys over the status code; None: omit.
    should_retry: bool | None = None

    @classmethod
    def rate_limit(cls, message: str = "Rate limit reached for requests") -> Fault:
        return cls(429, message, "requests", "rate_limit_exceeded")

    @classmethod
    def for_status(cls, status: int) -> Fault:
        if status == 429:
            return cls.rate_limit()
        if status >= 500:
            return cls(
                status, "The server had an error while processing your request.", "server_error"
            )
        return cls(status, f"fakellm: HTTP {status}", "invalid_request_error")


StreamFaultKind = Literal["hang", "drip", "reset", "truncate", "wrong_schema", "plain_json"]


@dataclass(frozen=True)
class StreamFault:
    """A reply that goes wrong after the request was accepted, as real model servers and
    the proxies in front of them do. `Fault` is the other kind: an HTTP error instead of a
    reply. Applies to streamed and plain requests alike."""

    kind: StreamFaultKind
    # drip, reset, truncate: stream chunks sent first (the first one carries only the role);
    # None for truncate: every chunk before the one with `finish_reason`.
    after_chunks: int | None = 2
    every_s: float = 1.0  # drip: seconds between two keepalives

    @classmethod
    def hang(cls) -> StreamFault:
        """Not one byte, headers included, until the client gives up."""
        return cls("hang")

    @classmethod
    def drip(cls, every_s: float = 1.0, *, after_chunks: int = 2) -> StreamFault:
        """A few chunks, then an SSE comment (`: keepalive`) every `every_s` for ever: never
        silent for long enough to trip a read timeout (a plain reply: a space instead)."""
        return cls("drip", after_chunks, every_s)

    @classmethod
    def reset(cls, *, after_chunks: int = 2) -> StreamFault:
        """A few chunks, then the connection is closed mid-response (a plain reply: half
        its body)."""
        return cls("reset", after_chunks)

    @classmethod
    def truncate(cls, *, after_chunks: int | None = None) -> StreamFault:
        """The response ends cleanly but early: no `finish_reason`, no usage, no `[DONE]`
        (a plain reply: half its body)."""
        return cls("truncate", after_chunks)

    @classmethod
    def wrong_schema(cls) -> StreamFault:
        """Well-formed JSON of the wrong shape: stream chunks without `choices` (then
        `[DONE]`); a plain reply that is no chat completion."""
        return cls("wrong_schema", None)

    @classmethod
    def plain_json(cls) -> StreamFault:
        """Even a streamed request gets one plain JSON object that is no chat completion,
        as from a server that ignores `stream` and speaks another API."""
        return cls("plain_json", None)


@dataclass(frozen=True)
class Latency:
    """Streaming pace: wait `ttft_ms` before the first chunk, then one chunk per token."""

    ttft_ms: float = 0.0
    tokens_per_s: float | None = None  # None: as fast as possible

    @property
    def per_token_s(self) -> float:
        return 1.0 / self.tokens_per_s if self.tokens_per_s else 0.0


@dataclass(frozen=True)
class Reply(chat.Reply):
    """What the model answers to one request, and how the answer goes out."""

    fault: Fault | None = None
    # Seconds before any response byte (headers included): simulates a hung upstream.
    delay_s: float = 0.0
    latency: Latency | None = None  # None: the server's default
    # Streaming only: send this many chunks, then drop the connection (as StreamFault.reset).
    drop_after_chunks: int | None = None
    stream_fault: StreamFault | None = None
    finish_reason: str | None = None  # None: "tool_calls" if any, else "stop"

    @classmethod
    def fail(cls, status: int = 500, **options: Any) -> Reply:
        return cls(fault=Fault.for_status(status), **options)

    @classmethod
    def broken(cls, fault: StreamFault, text: str = "", **options: Any) -> Reply:
        """`text` is the answer the fault cuts short (or reshapes)."""
        return cls(text=text, stream_fault=fault, **options)

    @property
    def resolved_stream_fault(self) -> StreamFault | None:
        if self.stream_fault is None and self.drop_after_chunks is not None:
            return StreamFault.reset(after_chunks=self.drop_after_chunks)
        return self.stream_fault

    @property
    def resolved_finish_reason(self) -> str:
        if self.finish_reason is not None:
            return self.finish_reason
        return super().resolved_finish_reason


class Policy(Protocol):
    """Decides the reply to each request. Called on the server's event loop."""

    def __call__(self, request: ChatRequest) -> Reply: ...
