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
