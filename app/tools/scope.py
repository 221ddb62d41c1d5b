"""Who the conversation serves, decided by the server: the token's customer, or the customer
a guest proved to be with a one-time code (confirm_identity). Never a tool argument the
model wrote, and never an email or name the guest merely knew."""

from __future__ import annotations

from collections.abc import Mapping
from typing import Any

from langchain_core.messages import AIMessage, HumanMessage
from langgraph.prebuilt import ToolRuntime

from app.identity import AgentContext
from app.identity import conversation_customer as customer_of
from app.tools.results import Observation, error_text, failed_with

Runtime = ToolRuntime[AgentContext, Any]

NOT_VERIFIED = error_text(
    "the customer's identity is not verified yet. Ask for their email address (or "
    "first name, last name and zip code) and call find_user_id_by_email (or "
    "find_user_id_by_name_zip) to email them a code, then confirm_identity with the code "
    "they type."
)
NO_CONTEXT = error_text("this conversation has no session; nothing was done.")
MAX_ECHO = 64
# Longest id a tool argument accepts (user, order, item, product ids are far shorter).
MAX_ID_CHARS = 64


def not_verified() -> Observation:
    return failed_with("not_verified", NOT_VERIFIED)


def clip(text: str) -> str:
    """A model-written id, shortened before it is echoed back in an observation."""
    return text if len(text) <= MAX_ECHO else text[:MAX_ECHO] + "…"


def order_not_found(order_id: str) -> str:
    return f"order {clip(order_id)} was not found for this customer."


def user_not_found(user_id: str) -> str:
    return f"user {clip(user_id)} was not found."


def context_of(runtime: Runtime) -> AgentContext | None:
    context = getattr(runtime, "context", None)
    return context if isinstance(context, AgentContext) else None


def state_value(runtime: Runtime, key: str) -> Any:
    state = getattr(runtime, "state", None)
    if isinstance(state, Mapping):
        return state.get(key)
    return getattr(state, key, None)


def conversation_customer(runtime: Runtime) -> str | None:
    """The token's user for a customer; the verified user (or None) for a guest."""
    context = context_of(runtime)
    if context is None:
        return None
    verified = state_value(runtime, "verified_user_id")
    return customer_of(context, verified if isinstance(verified, str) else None)


def turn_id(runtime: Runtime) -> str:
    """The state's turn id, else the last human message's id, else the tool call id."""
    explicit = state_value(runtime, "turn_id")
    if isinstance(explicit, str) and explicit:
        return explicit
    for message in reversed(state_value(runtime, "messages") or []):
        if isinstance(message, HumanMessage) and message.id:
            return str(message.id)
    return runtime.tool_call_id or ""


def call_arguments(runtime: Runtime, validated: Mapping[str, Any]) -> dict[str, Any]:
    """The arguments exactly as the model wrote them in this tool call, so a key computed
    from the checkpointed call (crash repair) matches; `validated` if the call is not found."""
    call_id = runtime.tool_call_id
    for message in reversed(state_value(runtime, "messages") or []):
        if isinstance(message, AIMessage):
            for call in message.tool_calls:
                if call_id and call["id"] == call_id:
                    return dict(call["args"])
    return dict(validated)
