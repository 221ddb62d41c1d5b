"""The common path of every write tool: scope, idempotency key, transactional execution."""

from __future__ import annotations

from collections.abc import Callable, Mapping
from typing import Any

from psycopg_pool import AsyncConnectionPool

from app.db.idempotency import idempotency_key
from app.db.writes import WriteAction, WriteOutcome, execute_write
from app.tools.results import Observation, error
from app.tools.scope import (
    NO_CONTEXT,
    Runtime,
    call_arguments,
    context_of,
    conversation_customer,
    not_verified,
    turn_id,
)


async def run_write(
    pool: AsyncConnectionPool[Any],
    runtime: Runtime,
    *,
    tool_name: str,
    args: Mapping[str, Any],
    action_for: Callable[[str | None], WriteAction],
    needs_customer: bool = True,
) -> WriteOutcome | Observation:
    """Run the action built for the conversation's customer, exactly once per turn and args:
    its outcome, which the tool's spec renders (`ToolSpec.outcome`).

    Unverified calls are refused before anything is recorded.
    """
    context = context_of(runtime)
    if context is None:
        return error("refused", NO_CONTEXT)
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
        action=action_for(customer_id),
    )
