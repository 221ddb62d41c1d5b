"""The demo model reads everything it needs from the request: there is no memory between
calls, so any number of conversations can share one policy, and a restart loses nothing.

A `Task` is what the customer is currently asking for: the latest message with an intent,
plus the messages after it that answered the assistant's questions (an order id, a reason,
an address, a yes).
"""

from __future__ import annotations

import json
import re
from collections.abc import Callable, Iterable
from dataclasses import dataclass, field
from functools import cached_property
from typing import Any, TypeVar

from app.demo.chat import ChatRequest, content_text
from app.demo.parsing import Intent, intent_of, is_chinese, is_no, is_yes, order_id_in
from app.demo.texts import CONFIRM_MARK, Lang

T = TypeVar("T")

# Phrases of app/agent/prompts.py the demo model reads, as a real model would.
_VERIFIED = re.compile(r"customer is verified: user id (\S+?)\.?(?=\s|$)")
_HANDED_OFF = "handed to a human agent"
_NO_MORE_TOOLS = "Stop calling tools now"
LOOKUP_TOOLS = frozenset({"find_user_id_by_email", "find_user_id_by_name_zip"})
IDENTITY_TOOLS = LOOKUP_TOOLS | {"confirm_identity"}
# How app/tools/identity.py words a guest's lookup (a code was sent, nobody is verified yet).
CODE_SENT_MARK = "Verification started"
_USER_ID = re.compile(r"[A-Za-z0-9_.-]{1,64}")
_VERIFIED_ID = re.compile(r"User id: ([A-Za-z0-9_.-]{1,64}) \(verified for this conversation\)")
# The tools that finish each task; once one is called, a later message starts afresh.
FINAL_TOOL: dict[Intent, tuple[str, ...]] = {
    "status": ("get_order_details", "get_order_status"),
    "orders": ("get_user_details",),
    "shipping": ("calc_shipping",),
    "cancel": ("cancel_pending_order",),
    "address": ("modify_pending_order_address",),
    "return": ("return_delivered_order_items",),
    "human": ("transfer_to_human_agents",),
}
LOOKBACK_MESSAGES = 8
_NOTE = re.compile(r"\(.*\)")


@dataclass(frozen=True)
class Call:
    id: str
    name: str
    args: dict[str, Any]


@dataclass(frozen=True)
class Result:
    """A tool message with the call it answers."""

    name: str
    args: dict[str, Any]
    content: str

    @property
    def body(self) -> str:
        """The content without the notes the app may append on their own lines, such as
        "(cached: same result as an earlier identical call ...)"."""
        lines = self.content.strip().splitlines()
        while len(lines) > 1 and _NOTE.fullmatch(lines[-1].strip()):
            lines.pop()
        return "\n".join(lines).strip()

    @property
    def is_error(self) -> bool:
        return self.content.startswith("Error:")

    @property
    def is_declined(self) -> bool:
        return self.content.startswith("Declined")

    @property
    def ok(self) -> bool:
        return not (self.is_error or self.is_declined)

    @property
    def user_id(self) -> str | None:
        """The user id an identity tool answered with ("User id: sara_doe_496 (verified for
        this conversation)", or the bare id); None for anything else (a code sent,
        "Not verified: ...", an error)."""
        if self.name not in IDENTITY_TOOLS or not self.ok:
            return None
        body = self.body
        labelled = _VERIFIED_ID.fullmatch(body)
        if labelled:
            return labelled.group(1)
        return body if _USER_ID.fullmatch(body) else None

    @property
    def code_sent(self) -> bool:
        return self.name in LOOKUP_TOOLS and self.body.startswith(CODE_SENT_MARK)


@dataclass
class Turn:
    """One customer message and what the assistant did after it."""

    text: str
    answered_confirmation: bool  # the assistant had just asked for a yes
    calls: list[Call] = field(default_factory=list)
    results: list[Result] = field(default_factory=list)
    replies: list[str] = field(default_factory=list)

    @property
    def is_confirmation_reply(self) -> bool:
        return self.answered_confirmation and (is_yes(self.text) or is_no(self.text))

    @property
    def intent(self) -> Intent | None:
        return None if self.is_confirmation_reply else intent_of(self.text)


@dataclass(frozen=True)
class Task:
    intent: Intent
    texts: tuple[str, ...]  # the message that asked, then the ones that added details
    confirmed: bool = False  # the last message is a yes to the assistant's question
    declined: bool = False  # ... or a no

    @property
    def opening(self) -> str:
        return self.texts[0]

    def find(self, read: Callable[[str], T | None]) -> T | None:
        """The newest value `read` finds in the task's messages."""
        for text in reversed(self.texts):
            value = read(text)
            if value is not None:
                return value
        return None


class Conversation:
    def __init__(self, request: ChatRequest, *, verified_user_id: str | None = None) -> None:
        self.request = request
        self._verified_override = verified_user_id
        self.system = request.system_prompt or ""
        self.turns, self.pending = _read_messages(request.messages)

    def verified_as(self, user_id: str) -> Conversation:
        return Conversation(self.request, verified_user_id=user_id)

    @property
    def last_text(self) -> str:
        return self.turns[-1].text if self.turns else ""

    @cached_property
    def lang(self) -> Lang:
        return "zh" if is_chinese(self.last_text) else "en"

    @cached_property
    def verified_user_id(self) -> str | None:
        if self._verified_override:
            return self._verified_override
        match = _VERIFIED.search(self.system)
        if match:
            return match.group(1)
        for turn in reversed(self.turns):
            for result in reversed(turn.results):
                if result.user_id:
                    return result.user_id
        return None

    @property
    def is_guest(self) -> bool:
        return self.verified_user_id is None

    @property
    def awaiting_code(self) -> bool:
        """A guest who was sent a code in this conversation and is not verified yet."""
        return self.is_guest and any(r.code_sent for t in self.turns for r in t.results)

    @property
    def handed_off(self) -> bool:
        return _HANDED_OFF in self.system

    @property
    def may_call_tools(self) -> bool:
        return bool(self.request.tools) and _NO_MORE_TOOLS not in self.system

    @property
    def tool_names(self) -> list[str]:
        return self.request.tool_names

    @property
    def current_calls(self) -> list[Call]:
        return self.turns[-1].calls if self.turns else []

    def user_texts(self) -> list[str]:
        return [turn.text for turn in self.turns]

    def results_of(self, tool: str) -> list[str]:
        """What `tool` answered in this conversation (successful results only)."""
        return [r.body for t in self.turns for r in t.results if r.name == tool and r.ok]

    def task(self) -> Task | None:
        """What the customer is asking for now, or None (small talk, or a finished task)."""
        if not self.turns:
            return None
        last = self.turns[-1]
        intent = last.intent
        if intent is not None:
            return Task(intent, (last.text,))
        confirmed = last.is_confirmation_reply and is_yes(last.text)
        declined = last.is_confirmation_reply and not confirmed
        first = max(0, len(self.turns) - 1 - LOOKBACK_MESSAGES)
        for start in range(len(self.turns) - 2, first - 1, -1):
            opening = self.turns[start].intent
            if opening is None:
                continue
            if _finished(opening, self.turns[start:-1]):
                break
            texts = tuple(t.text for t in self.turns[start:])
            return Task(opening, texts, confirmed=confirmed, declined=declined)
        if order_id_in(last.text) is not None:
            return Task("status", (last.text,))
        return None


def _finished(intent: Intent, turns: Iterable[Turn]) -> bool:
    final = FINAL_TOOL.get(intent)
    if final is None:
        return True  # greetings and questions are answered at once
    for i, turn in enumerate(turns):
        if any(call.name in final for call in turn.calls):
            return True
        if i > 0 and turn.is_confirmation_reply and not is_yes(turn.text):
            return True  # the customer said no
    return False


def _read_messages(messages: list[dict[str, Any]]) -> tuple[list[Turn], list[Result]]:
    """Group the messages into turns; also return the tool results awaiting an answer."""
    turns: list[Turn] = []
    calls: dict[str, Call] = {}
    pending: list[Result] = []
    for message in messages:
        role = message.get("role")
        if role == "user":
            asked = bool(turns) and any(
                mark in reply for reply in turns[-1].replies[-1:] for mark in CONFIRM_MARK.values()
            )
            turns.append(Turn(content_text(message), answered_confirmation=asked))
            pending = []
        elif role == "assistant":
            pending = []
            text = content_text(message)
            if turns and text:
                turns[-1].replies.append(text)
            for call in _calls_of(message):
                calls[call.id] = call
                if turns:
                    turns[-1].calls.append(call)
        elif role == "tool":
            answered = calls.get(str(message.get("tool_call_id", "")))
            result = Result(
                answered.name if answered else "",
                answered.args if answered else {},
                content_text(message),
            )
            pending.append(result)
            if turns:
                turns[-1].results.append(result)
    return turns, pending


def _calls_of(message: dict[str, Any]) -> list[Call]:
    out: list[Call] = []
    for raw in message.get("tool_calls") or []:
        if not isinstance(raw, dict):
            continue
        function = raw.get("function") or {}
        try:
            args = json.loads(function.get("arguments") or "{}")
        except (TypeError, ValueError):
            args = {}
        out.append(
            Call(
                str(raw.get("id", "")),
                str(function.get("name", "")),
                args if isinstance(args, dict) else {},
            )
        )
    return out
