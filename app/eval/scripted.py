"""The offline customer: plays each task from its `customer_lines`, so an evaluation runs
with no model at all (the agent side then being the service's built-in demo model).

It keeps to the simulator's rules in the simplest way: it finds its task by the instruction
in the system prompt, answers a confirmation with yes (or with the no or yes that is its
next line, or leaves when that is ###STOP###), types a code that arrived in its inbox,
gives the email (or zip code) the instruction names when the agent asks for it, says its
next line, and then ###STOP###.
Stateless: everything is read from the conversation it is given.
"""

from __future__ import annotations

import re
from collections.abc import Sequence
from dataclasses import dataclass
from typing import Any

from app.eval.simulator import CONFIRM_QUESTION, STOP, Completion
from app.eval.tasks import Task

LABEL = "scripted (built-in)"
_CODE = re.compile(r"verification code is (\d{6})", re.IGNORECASE)
_EMAIL = re.compile(r"[\w.+-]+@[\w-]+(?:\.[\w-]+)+")
_ZIP = re.compile(r"\b\d{5}\b")
_ASKS_EMAIL = re.compile(r"[^.?!]*\be-?mail\b[^.?!]*\?", re.IGNORECASE)
_ASKS_ZIP = re.compile(r"[^.?!]*\bzip\b[^.?!]*\?", re.IGNORECASE)
_YES_OR_NO = frozenset({"yes", "no"})


@dataclass(frozen=True)
class ScriptedChat:
    """A `ChatModel` for every task of a run (no tokens: it is not a model)."""

    tasks: Sequence[Task]

    async def complete(self, messages: list[dict[str, Any]]) -> Completion:
        return Completion(self.reply(messages))

    def reply(self, messages: Sequence[dict[str, Any]]) -> str:
        prompt = next((_text(m) for m in messages if m.get("role") == "system"), "")
        task = next((t for t in self.tasks if t.instruction in prompt), None)
        if task is None:
            return STOP
        agent = [_text(m) for m in messages if m.get("role") == "user"]
        said = [_text(m) for m in messages if m.get("role") == "assistant"]
        return next_line(task, agent, said)


def _text(message: dict[str, Any]) -> str:
    content = message.get("content")
    return content if isinstance(content, str) else ""


def script_of(task: Task) -> list[str]:
    return list(task.customer_lines) or [task.instruction]


def next_line(task: Task, agent_texts: Sequence[str], said: Sequence[str]) -> str:
    """What the customer says after the agent's latest message."""
    last = agent_texts[-1] if agent_texts else ""
    lines = script_of(task)
    remaining = lines[sum(1 for s in said if s in lines) :]
    if CONFIRM_QUESTION in last:
        if remaining and (remaining[0].lower() in _YES_OR_NO or remaining[0] == STOP):
            return remaining[0]  # a recorded customer's answer, or their leaving unanswered
        return "yes"
    code = _CODE.search(last)
    if code:
        return code.group(1)
    for pattern, asks, answer in (
        (_EMAIL, _ASKS_EMAIL, "My email is {}."),
        (_ZIP, _ASKS_ZIP, "My zip code is {}."),
    ):
        fact = pattern.search(task.instruction)
        if fact and asks.search(last) and not any(fact.group(0) in s for s in said):
            return answer.format(fact.group(0))
    while remaining and remaining[0].lower() in _YES_OR_NO:
        remaining = remaining[1:]  # an answer kept for a confirmation that was never asked
    return remaining[0] if remaining else STOP
