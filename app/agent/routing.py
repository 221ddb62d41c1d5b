"""The conditional edge after the agent, and the per-tool circuit breaker it consults.

Breaker rules (all state is checkpointed, so they survive restarts):
- a tool opens after `breaker_failure_threshold` consecutive `Error:` results, or when the
  model asks for it more than `breaker_max_calls_per_turn` times in one turn;
- an open breaker stays open for `breaker_cooldown_turns` turns (counted from the turn it
  opened in), then lets calls through half-open: one success closes it, one failure
  reopens it for another cool-down.
"""

from __future__ import annotations

from collections.abc import Iterable, Sequence
from typing import Any, Literal

from langchain_core.messages import AIMessage, ToolCall, ToolMessage

from app.agent.state import AgentState, Breaker
from app.agent.trimming import count_tokens
from app.config import Settings

Route = Literal["__end__", "summarize", "read_tools", "confirm", "write_tools", "blocked"]

BREAKER_OPEN = (
    "Error: tool {name} is temporarily unavailable; answer with what you have or "
    "transfer to a human."
)
CALL_CAP = (
    "Error: tool {name} was called too many times this turn; answer with what you have or "
    "transfer to a human."
)
INVALID_ARGS_KEY = "__invalid_arguments__"


def breaker_is_open(breaker: Breaker | None, turn_number: int, settings: Settings) -> bool:
    if breaker is None or breaker["opened_turn"] is None:
        return False
    return turn_number < breaker["opened_turn"] + settings.breaker_cooldown_turns


def blocked_calls(
    state: AgentState, calls: Sequence[ToolCall], settings: Settings
) -> dict[str, str]:
    """Map tool_call_id -> the Error observation for calls the breaker refuses."""
    counts = dict(state.get("turn_tool_calls") or {})
    breakers = state.get("breakers") or {}
    turn = state.get("turn_number", 0)
    blocked: dict[str, str] = {}
    for call in calls:
        name = call["name"]
        call_id = call["id"] or ""
        if breaker_is_open(breakers.get(name), turn, settings):
            blocked[call_id] = BREAKER_OPEN.format(name=name)
            continue
        counts[name] = counts.get(name, 0) + 1
        if counts[name] > settings.breaker_max_calls_per_turn:
            blocked[call_id] = CALL_CAP.format(name=name)
    return blocked


def last_ai(state: AgentState) -> AIMessage | None:
    messages = state.get("messages") or []
    last = messages[-1] if messages else None
    return last if isinstance(last, AIMessage) else None


def route_after_agent(state: AgentState, settings: Settings, write_names: frozenset[str]) -> Route:
    ai = last_ai(state)
    if ai is None or not ai.tool_calls:
        # Only a long thread pays for the summarise step (and its checkpoint).
        long = count_tokens(state.get("messages") or []) > settings.summary_trigger_tokens
        return "summarize" if long else "__end__"
    blocked = blocked_calls(state, ai.tool_calls, settings)
    runnable = [c for c in ai.tool_calls if c["id"] not in blocked]
    if not runnable:
        return "blocked"
    if any(c["name"] in write_names for c in runnable):
        return "confirm" if settings.write_confirmation == "required" else "write_tools"
    return "read_tools"


def is_failure(message: ToolMessage) -> bool:
    return isinstance(message.content, str) and message.content.startswith("Error:")


def updated_breakers(
    breakers: dict[str, Breaker],
    results: Iterable[ToolMessage],
    turn_number: int,
    settings: Settings,
) -> dict[str, Breaker]:
    out = {name: Breaker(**b) for name, b in breakers.items()}
    for msg in results:
        name = msg.name or ""
        if msg.content in {
            BREAKER_OPEN.format(name=name),
            CALL_CAP.format(name=name),
        }:
            continue  # refused by the breaker itself: not a new failure of the tool
        b = out.get(name, Breaker(failures=0, opened_turn=None))
        if is_failure(msg):
            failures = b["failures"] + 1
            reopen = failures >= settings.breaker_failure_threshold
            out[name] = Breaker(
                failures=failures, opened_turn=turn_number if reopen else b["opened_turn"]
            )
        else:
            out[name] = Breaker(failures=0, opened_turn=None)
    return out


def new_tool_results(messages: Sequence[Any]) -> list[ToolMessage]:
    """Tool results after the newest assistant message."""
    out: list[ToolMessage] = []
    for m in reversed(messages):
        if isinstance(m, ToolMessage):
            out.append(m)
        elif isinstance(m, AIMessage):
            break
    return list(reversed(out))
