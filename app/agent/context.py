"""Per-run data handed to every node and tool as LangGraph runtime context."""

from __future__ import annotations

from dataclasses import dataclass
from typing import Literal

Role = Literal["customer", "guest"]


@dataclass(frozen=True)
class AgentContext:
    user_id: str  # the token's subject
    role: Role
    thread_id: str  # "{user_id}:{session_id}"


def conversation_customer(context: AgentContext, verified_user_id: str | None) -> str | None:
    """Whom the conversation serves: the token's customer, or the customer a guest verified
    as (None until then). Never a tool argument the model wrote."""
    if context.role == "customer":
        return context.user_id
    return verified_user_id or None
