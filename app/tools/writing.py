"""The common path of every write tool: scope, idempotency key, transactional execution.

A write tool's function builds its action for a `Session` (app/tools/spec.py); this runs it.
"""

from __future__ import annotations

from collections.abc import Callable, Mapping
from dataclasses import dataclass
from typing import Any

from psycopg_pool import AsyncConnectionPool

from app.db.idempotency import idempotency_key
from app.db.writes import WriteAction, WriteOutcome, execute_write
from app.tools.results import Observation, failed_with
from app.tools.scope import (
    NO_CONTEXT,
    Runtime,
    call_arguments,
    context_of,
    conversation_customer,
    not_verified,
    turn_id,
)


@dataclass(frozen=True)
class Session:
    """Whom a write is made for, as the server knows it: the conversation's customer (None
    for a guest not verified yet) and its thread."""

    customer_id: str | None
    thread_id: str


async def run_write(
    pool: AsyncConnectionPool[Any],
    runtime: Runtime | None,
    *,
    tool_name: str,
    args: Mapping[str, Any],
    action_for: Callable[[Session], WriteAction],
    needs_customer: bool = True,
) -> WriteOutcome | Observation:
    """Run the action built for the conversation, exactly once per turn and args: its
    outcome, which the tool's spec renders (`ToolSpec.outcome`).

    Unverified calls are refused before anything is recorded.
    """
    context = context_of(runtime) if runtime is not None else None
    if runtime is None or context is None:
        return failed_with("refused", NO_CONTEXT)
    customer_id = conversation_customer(runtime)
    if needs_customer and customer_id is None:
        return not_verified()
    key = idempotency_key(
        context.thread_id, turn_id(runtime), tool_name, call_arguments(runtime, args)
    )
    return await execute_write(
        pool,
        idempotency_key=key,
        thread_id=context.thread_id,
        actor=f"{context.role}:{context.user_id}",
        customer_id=customer_id,
        tool_name=tool_name,
        arguments=args,
        action=action_for(Session(customer_id, context.thread_id)),
    )
