"""What the demo policy reads and what it answers.

`ChatRequest` is one chat-completions request as OpenAI-style message dicts, the shape any
hosted model is sent; `Reply` is the answer: text, tool calls, or both. The demo model
(model.py) builds the request from LangChain messages. The tests' scripted model server
(tests/fakellm) builds it from an HTTP body and extends both types with what only tests
need (faults, pacing, recorded headers).
"""

from __future__ import annotations

import json
import math
import re
from collections.abc import Mapping
from dataclasses import dataclass, field
from typing import Any, Self

JSONDict = dict[str, Any]

CHARS_PER_TOKEN = 4
TOKENS_PER_MESSAGE = 4  # role and separators, roughly what OpenAI adds per message
# CJK text has no spaces: each ideograph (or full-width mark) is its own piece.
_CJK = "\u3000-\u303f\u3400-\u4dbf\u4e00-\u9fff\uf900-\ufaff\uff00-\uffef"
_WORD = re.compile(rf"\s*(?:[{_CJK}]|[^\s{_CJK}]+)")


@dataclass(frozen=True)
class ChatRequest:
    """One request, as the model would have seen it."""

    messages: list[JSONDict]
    tools: list[JSONDict] = field(default_factory=list)
    model: str = ""

    @property
    def system_prompt(self) -> str | None:
        for message in self.messages:
            if message.get("role") in ("system", "developer"):
                return content_text(message)
        return None

    @property
    def tool_names(self) -> list[str]:
        return [str(t.get("function", {}).get("name", "")) for t in self.tools]


def content_text(message: Mapping[str, Any]) -> str:
    """Message content as plain text (content may be a string or a list of parts)."""
    content = message.get("content")
    if isinstance(content, str):
        return content
    if isinstance(content, list):
        return "".join(str(part.get("text", "")) for part in content if isinstance(part, dict))
    return ""


@dataclass(frozen=True)
class ToolCall:
    """One function call. A `str` for `arguments` is sent verbatim (e.g. malformed JSON)."""

    name: str
    arguments: Mapping[str, Any] | str = field(default_factory=dict)
    id: str | None = None

    def arguments_json(self) -> str:
        if isinstance(self.arguments, str):
            return self.arguments
        return json.dumps(dict(self.arguments))


@dataclass(frozen=True)
class Reply:
    """What the model answers to one request."""

    text: str = ""
    tool_calls: tuple[ToolCall, ...] = ()

    @classmethod
    def say(cls, text: str, **options: Any) -> Self:
        return cls(text=text, **options)

    @classmethod
    def call(cls, name: str, /, **arguments: Any) -> Self:
        return cls(tool_calls=(ToolCall(name, arguments),))

    @classmethod
    def calls(cls, *calls: ToolCall, text: str = "") -> Self:
        return cls(text=text, tool_calls=calls)

    @property
    def resolved_finish_reason(self) -> str:
        return "tool_calls" if self.tool_calls else "stop"


def estimate_tokens(text: str) -> int:
    return math.ceil(len(text) / CHARS_PER_TOKEN)


def prompt_tokens(request: ChatRequest) -> int:
    """Deterministic input size: ~4 characters per token of messages and tool schemas."""
    total = 0
    for message in request.messages:
        total += TOKENS_PER_MESSAGE + estimate_tokens(json.dumps(message.get("content") or ""))
        for call in message.get("tool_calls") or []:
            total += estimate_tokens(json.dumps(call.get("function", {})))
    if request.tools:
        total += estimate_tokens(json.dumps(request.tools))
    return total


def completion_tokens(reply: Reply) -> int:
    total = estimate_tokens(reply.text)
    for call in reply.tool_calls:
        total += estimate_tokens(call.name) + estimate_tokens(call.arguments_json())
    return max(total, 1)


def split_words(text: str) -> list[str]:
    """Word-sized pieces, the tokens of a stream, that join back to exactly `text`
    (leading spaces stay attached; each CJK character is a piece of its own)."""
    pieces = _WORD.findall(text)
    rest = text[sum(map(len, pieces)) :]
    if rest:
        pieces.append(rest)
    return pieces
