"""What a Platform run asks for, as one of cs-agent's runs: a message, a decision on a
pending confirmation, or a fork from a checkpoint. Whatever cannot be honoured is
refused here, by name (see docs/langgraph-api.md)."""

from __future__ import annotations

import re
from typing import Any

from pydantic import ValidationError

from app.api.lg.errors import refuse
from app.api.lg.schemas import RunCreate
from app.api.lg.translate import MODES
from app.api.schemas import MessageIn

_CLIENT_ID_RE = re.compile(r"^[A-Za-z0-9_.:-]{1,128}$")
_APPROVALS = frozenset({"approve", "accept"})
_ENDS = frozenset({"__end__", "END"})


def check_supported(body: RunCreate) -> None:
    if _filled(body.config):
        refuse(
            "a run's config is the server's own (thread, limits); send none", "config_unsupported"
        )
    if _filled(body.context):
        refuse(
            "a run's context (who the customer is) comes from the token, never the client",
            "context_unsupported",
        )
    if body.multitask_strategy not in (None, "reject"):
        refuse(
            "one writer per thread: a run on a busy thread is refused (409); "
            "multitask_strategy must be 'reject'",
            "multitask_strategy_unsupported",
        )
    if body.interrupt_before or body.interrupt_after:
        refuse(
            "breakpoints are not supported: writes already wait for confirmation",
            "breakpoints_unsupported",
        )
    if body.after_seconds:
        refuse("delayed runs are not supported", "after_seconds_unsupported")
    if body.on_completion == "delete":
        refuse(
            "threads are kept; delete one with DELETE /threads/{id}", "on_completion_unsupported"
        )
    command = body.command
    if command is not None:
        if _filled(command.update):
            refuse(
                "command.update is not supported: state is written only by the agent",
                "command_unsupported",
            )
        if command.goto not in (None, [], *_ENDS):
            refuse(
                "command.goto is supported only as '__end__', to decline a pending confirmation",
                "command_unsupported",
            )


def _filled(value: Any) -> bool:
    """Anything but None and empty containers (clients send `{}` and `{"configurable": {}}`)."""
    if isinstance(value, dict):
        return any(_filled(v) for v in value.values())
    if isinstance(value, list | tuple):
        return bool(value)
    return value is not None


def stream_modes(value: str | list[str]) -> frozenset[str]:
    """The modes to send. Any other (`events`, `debug`, `tasks`, `checkpoints`,
    `lifecycle`) is refused by name rather than accepted and never sent."""
    modes = [m for m in ([value] if isinstance(value, str) else value) if m]  # SDKs send ""
    unsupported = sorted({m for m in modes if m not in MODES})
    if unsupported:
        refuse(
            f"stream mode {', '.join(unsupported)} is not supported; "
            f"use {', '.join(sorted(MODES))}",
            "stream_mode_unsupported",
        )
    return frozenset(modes)


def decision_of(command_resume: Any, goto: Any) -> str:
    """Decisions map to our one decision per turn: all approve → approve, anything else
    (a reject, an edit, a response, an empty list) → reject."""
    if goto in _ENDS and command_resume is None:
        return "reject"
    kinds = _kinds(command_resume)
    return "approve" if kinds and all(k in _APPROVALS for k in kinds) else "reject"


def _kinds(value: Any) -> list[str]:
    if isinstance(value, str):
        return [value.lower()]
    if isinstance(value, list):
        return [k for item in value for k in _kinds(item)] if value else []
    if isinstance(value, dict):
        if "decisions" in value:
            return _kinds(value["decisions"]) or ["reject"]
        for key in ("type", "decision"):
            if isinstance(value.get(key), str):
                return [str(value[key]).lower()]
        # keyed by interrupt id: {interrupt_id: resume value}
        return [k for item in value.values() for k in _kinds(item)]
    return ["reject"]


def message_of(value: Any) -> tuple[str, str | None] | None:
    """The human message of a run's input: its text and the client's id for it (used as
    the client_message_id, so a retried submit does the turn once). None when there is
    no input. Tool messages are skipped: a UI that closes tool calls it sees as open is
    answered by the service, which closes its own."""
    if value is None:
        return None
    if not isinstance(value, dict):
        refuse('input must be an object: {"messages": [...]}', "input_unsupported")
    others = sorted(k for k, v in value.items() if k != "messages" and _filled(v))
    if others:
        refuse(f"input may hold only messages, not {', '.join(others)}", "input_unsupported")
    messages = value.get("messages")
    if messages is None or messages == []:
        return None
    if not isinstance(messages, list):
        messages = [messages]
    humans: list[dict[str, Any]] = []
    for message in messages:
        if isinstance(message, str):
            humans.append({"content": message})
            continue
        kind = message.get("type") or message.get("role") if isinstance(message, dict) else None
        if kind in ("human", "user"):
            humans.append(message)
        elif kind != "tool":
            refuse("input messages must be human messages", "input_unsupported")
    if not humans:
        return None
    if len(humans) != 1:
        refuse("send one human message per run", "input_unsupported")
    human = humans[0]
    client_id = human.get("id")
    if not isinstance(client_id, str) or not _CLIENT_ID_RE.fullmatch(client_id):
        client_id = None
    text = _text(human.get("content"))
    try:
        checked = MessageIn(content=text, client_message_id=client_id)
    except ValidationError as error:
        problem = error.errors()[0]
        refuse(f"message content: {problem.get('msg', 'invalid')}", "validation_error")
    return checked.content, checked.client_message_id


def _text(content: Any) -> str:
    if isinstance(content, str):
        return content
    if isinstance(content, list):
        parts: list[str] = []
        for block in content:
            if isinstance(block, str):
                parts.append(block)
            elif isinstance(block, dict) and block.get("type") == "text":
                parts.append(str(block.get("text", "")))
            else:
                refuse("only text content is supported", "input_unsupported")
        return "".join(parts)
    refuse("a message's content must be text", "input_unsupported")
