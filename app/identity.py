"""Who is acting: a signed-in customer or a guest, and whom a conversation serves.

The lowest layer of the app: it imports nothing of it, so the API, the runs, the agent and
the tools all read identity from this one place.
"""

from __future__ import annotations

import re
from dataclasses import dataclass
from typing import Literal

Role = Literal["customer", "guest", "staff", "admin"]
ROLES: tuple[Role, ...] = ("customer", "guest", "staff", "admin")
# Admins (issue 42: they publish policy versions) can do all staff can; ids as staff's.
STAFF_ROLES: tuple[Role, ...] = ("staff", "admin")

USER_ID_RE = re.compile(r"^[A-Za-z0-9_.@-]{1,128}$")
# Guests and customers must never share a user id, or a guest token could open a customer's
# threads (thread ids are keyed by user id). Guest ids carry this prefix; customer ids never do.
GUEST_PREFIX = "guest-"
# Staff (the people who take over conversations) likewise: `staff-...`, and only they.
STAFF_PREFIX = "staff-"


def subject_matches_role(user_id: str, role: str) -> bool:
    return user_id.startswith(GUEST_PREFIX) == (role == "guest") and user_id.startswith(
        STAFF_PREFIX
    ) == (role in STAFF_ROLES)


@dataclass(frozen=True)
class Principal:
    """The caller, as a verified token names it."""

    user_id: str
    role: Role
    name: str | None = None  # a staff member's display name (the token's `name` claim)

    @property
    def display_name(self) -> str:
        return self.name or self.user_id


@dataclass(frozen=True)
class AgentContext:
    """Per-run data handed to every node and tool as LangGraph runtime context."""

    user_id: str  # the token's subject
    role: Role
    thread_id: str  # "{user_id}:{session_id}"
    # The rules of the policy version the thread is pinned to (app/policies); None: the
    # shipped rules (app/agent/prompts.py POLICY, version 1).
    rules: str | None = None
    policy_version: int | None = None


def conversation_customer(context: AgentContext, verified_user_id: str | None) -> str | None:
    """Whom the conversation serves: the token's customer, or the customer a guest verified
    as (None until then). Never a tool argument the model wrote."""
    if context.role == "customer":
        return context.user_id
    return verified_user_id or None
