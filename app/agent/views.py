"""How messages look to API clients: a run's result and events, a thread's state, history
and archive, the /lg views. It reads the keys the agent's messages carry (`author`, `kind`,
`thought`), so it sits with the agent, below the runs and the threads that show them."""

from __future__ import annotations

from typing import Any

from langchain_core.messages import AIMessage, BaseMessage, HumanMessage, ToolMessage

from app.agent.edits import STAFF_AUTHOR
from app.agent.model_view import text_of

DISPLAY_LIMIT = 2000


def role_of(message: BaseMessage) -> str:
    if isinstance(message, HumanMessage):
        return "user"
    if isinstance(message, ToolMessage):
        return "tool"
    if isinstance(message, AIMessage):
        return "assistant"
    return message.type


def author_of(message: BaseMessage) -> str | None:
    """Who wrote it: the customer, the agent, or a person of the staff (named)."""
    if isinstance(message, HumanMessage):
        return "staff" if message.additional_kwargs.get("author") == STAFF_AUTHOR else "customer"
    if isinstance(message, AIMessage):
        return "agent"
    return None


def message_view(message: BaseMessage) -> dict[str, Any]:
    view: dict[str, Any] = {"id": message.id, "role": role_of(message), "content": text_of(message)}
    author = author_of(message)
    if author is not None:
        view["author"] = author
        if author == "staff":
            view["name"] = message.additional_kwargs.get("author_name") or message.name
            if message.additional_kwargs.get("kind") == "note":
                view["kind"] = "note"
    if isinstance(message, AIMessage) and message.tool_calls:
        view["tool_calls"] = [
            {"id": c["id"], "name": c["name"], "args": c["args"]} for c in message.tool_calls
        ]
    if isinstance(message, AIMessage) and message.additional_kwargs.get("thought"):
        view["thought"] = message.additional_kwargs["thought"]  # text protocol, for debugging
    if isinstance(message, ToolMessage):
        view["tool_call_id"] = message.tool_call_id
        view["name"] = message.name
        view["status"] = message.status
    return view


def shorten(text: str, limit: int = DISPLAY_LIMIT) -> str:
    return text if len(text) <= limit else text[: limit - 1] + "…"


def title_from(content: str, limit: int = 60) -> str:
    flat = " ".join(content.split())
    return flat if len(flat) <= limit else flat[: limit - 1].rstrip() + "…"
