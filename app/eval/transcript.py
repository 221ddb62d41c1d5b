"""What a recorded conversation said, read from its runs' records (`runs.result`: each run's
new messages, and the writes it paused for).

The customer's lines are their own messages, verbatim and in order, with their answer to
each confirmation in between (`yes` or `no`, as the offline scripted customer reads them;
`###STOP###` when they left without answering). A guest's typed code is left out (the
replay emails a new one). The agent's part ends at the hand-over: what the customer said to
the person after it is not the agent's to replay. Pure: app/eval/recording.py reads the rows.
"""

from __future__ import annotations

import re
from collections.abc import Mapping, Sequence
from dataclasses import dataclass, field
from typing import Any

from app.agent.tool_exec import DECLINED
from app.eval.simulator import STOP

HANDOFF_TOOL = "transfer_to_human_agents"
_CODE_ONLY = re.compile(r"^\W*\d{6}\W*$")


@dataclass
class Transcript:
    customer_lines: list[str] = field(default_factory=list)
    # (speaker, text) in order, "customer" or "agent", for the instruction's writer
    turns: list[tuple[str, str]] = field(default_factory=list)
    tool_calls: list[dict[str, Any]] = field(default_factory=list)  # {"name", "args"}
    declined: list[str] = field(default_factory=list)  # the writes the customer said no to
    handed_off: bool = False
    left_unanswered: bool = False  # the last confirmation was never answered


def read_runs(runs: Sequence[Mapping[str, Any]]) -> Transcript:
    """`runs`: each run's `result` (its status, messages and pending writes), oldest first."""
    out = Transcript()
    answers = _answers(runs)
    for index, result in enumerate(runs):
        if result.get("status") == "handed_off":
            break  # a message kept for the person who has the thread
        for message in _messages(result):
            _read(message, out)
        pending = result.get("pending") or []
        if result.get("status") == "interrupted" and pending:
            answer = answers.get(index)
            if answer is None:
                out.customer_lines.append(STOP)
                out.left_unanswered = True
                break
            out.customer_lines.append(answer)
            out.turns.append(("customer", answer))
        if out.handed_off:
            break
    return out


def _messages(result: Mapping[str, Any]) -> list[dict[str, Any]]:
    return [m for m in result.get("messages") or [] if isinstance(m, dict)]


def _read(message: Mapping[str, Any], out: Transcript) -> None:
    role, author = message.get("role"), message.get("author")
    content = str(message.get("content") or "")
    if role == "user" and author == "customer":
        if not _CODE_ONLY.match(content):
            out.customer_lines.append(content)
        out.turns.append(("customer", content))
    elif role == "assistant":
        if content.strip():
            out.turns.append(("agent", content))
        for call in message.get("tool_calls") or []:
            out.tool_calls.append({"name": call.get("name"), "args": call.get("args") or {}})
    elif role == "tool":
        name = str(message.get("name") or "")
        if content == DECLINED:
            out.declined.append(name)
        elif name == HANDOFF_TOOL and message.get("status") != "error":
            out.handed_off = True


def _answers(runs: Sequence[Mapping[str, Any]]) -> dict[int, str]:
    """The customer's answer to each run that paused for a confirmation, by the run's index:
    `no` when a later run declined the pending calls, `yes` when it ran them."""
    out: dict[int, str] = {}
    for index, result in enumerate(runs):
        ids = {str(p.get("id")) for p in result.get("pending") or [] if isinstance(p, dict)}
        if result.get("status") != "interrupted" or not ids:
            continue
        for later in runs[index + 1 :]:
            answered = [m for m in _messages(later) if str(m.get("tool_call_id")) in ids]
            if answered:
                declined = any(m.get("content") == DECLINED for m in answered)
                out[index] = "no" if declined else "yes"
                break
    return out
