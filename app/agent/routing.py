"""The conditional edge after the agent, and what a refused call reads.

The agent node decides once per model reply which calls the breakers refuse (`refused` in
state, app/agent/books.py); routing and the tool nodes only read that.
"""

from __future__ import annotations

from collections.abc import Sequence
from typing import Any, Literal

from langchain_core.messages import AIMessage, ToolMessage

from app.agent.state import AgentState
from app.agent.trimming import count_tokens
from app.config import Settings
from app.tools.results import error_text

Route = Literal["__end__", "summarize", "read_tools", "confirm", "write_tools", "blocked"]

BREAKER_OPEN = error_text(
    "tool {name} is temporarily unavailable; answer with what you have or transfer to a human."
)
CALL_CAP = error_text(
    "tool {name} was called too many times this turn; answer with what you have or "
    "transfer to a human."
)
REFUSALS = {"breaker_open": BREAKER_OPEN, "call_cap": CALL_CAP}
INVALID_ARGS_KEY = "__invalid_arguments__"


def refusal_text(kind: str, name: str) -> str:
    return REFUSALS.get(kind, CALL_CAP).format(name=name)


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
    refused = state.get("refused") or {}
    runnable = [c for c in ai.tool_calls if (c["id"] or "") not in refused]
    if not runnable:
        return "blocked"
    if any(c["name"] in write_names for c in runnable):
        return "confirm" if settings.write_confirmation == "required" else "write_tools"
    return "read_tools"


def new_tool_results(messages: Sequence[Any]) -> list[ToolMessage]:
    """Tool results after the newest assistant message."""
    out: list[ToolMessage] = []
    for m in reversed(messages):
        if isinstance(m, ToolMessage):
            out.append(m)
        elif isinstance(m, AIMessage):
            break
    return list(reversed(out))
