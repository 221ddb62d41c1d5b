"""Handing the conversation over to a human agent."""

from __future__ import annotations

from typing import Annotated, Any

from langchain_core.messages import ToolMessage
from langchain_core.tools import BaseTool
from langgraph.types import Command
from psycopg_pool import AsyncConnectionPool
from pydantic import Field

from app.tools.base import make_tool
from app.tools.order_actions import handoff_action
from app.tools.scope import Runtime, context_of
from app.tools.writing import run_write

MAX_SUMMARY_CHARS = 2000


def handoff_write_tools(pool: AsyncConnectionPool[Any]) -> list[BaseTool]:
    async def transfer_to_human_agents(
        summary: Annotated[
            str,
            Field(
                max_length=MAX_SUMMARY_CHARS,
                description="A short summary of the customer's issue and what was already "
                "done, for the human agent.",
            ),
        ],
        runtime: Runtime,
    ) -> str | Command[Any]:
        """Transfer the customer to a human agent, with a summary of their issue.

        Only transfer if the customer explicitly asks for a human agent, or if their request
        cannot be handled with the available tools and policy. After the transfer, tell the
        customer they are being transferred and stop.
        """
        context = context_of(runtime)
        thread_id = context.thread_id if context else ""
        outcome = await run_write(
            pool,
            runtime,
            tool_name="transfer_to_human_agents",
            args={"summary": summary},
            action_for=lambda c: handoff_action(c, thread_id, summary),
            needs_customer=False,
        )
        if not outcome.ok:
            return outcome.text
        message = ToolMessage(
            content=outcome.text,
            tool_call_id=runtime.tool_call_id or "",
            name="transfer_to_human_agents",
        )
        return Command(update={"handed_off": True, "messages": [message]})

    return [make_tool("transfer_to_human_agents", transfer_to_human_agents)]
