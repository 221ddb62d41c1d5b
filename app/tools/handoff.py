"""Handing the conversation over to a human agent."""

from __future__ import annotations

from typing import Annotated

from pydantic import Field

from app.db.writes import WriteOutcome
from app.tools import summaries
from app.tools.order_actions import handoff_action
from app.tools.results import Observation, error, found
from app.tools.scope import Runtime, context_of
from app.tools.spec import Confirm, ToolDeps, write_tool
from app.tools.writing import run_write

MAX_SUMMARY_CHARS = 2000


def handed_off(outcome: WriteOutcome) -> Observation:
    """A transfer that went through marks the conversation as handed over."""
    if not outcome.ok:
        return error("refused", outcome.text)
    return found(outcome.text, changes={"handed_off": True})


@write_tool(
    label="Handing over to a human agent …",
    confirm=Confirm("Transfer the conversation to a human agent", args=summaries.handoff),
    outcome=handed_off,
)
async def transfer_to_human_agents(
    deps: ToolDeps,
    summary: Annotated[
        str,
        Field(
            max_length=MAX_SUMMARY_CHARS,
            description="A short summary of the customer's issue and what was already "
            "done, for the human agent.",
        ),
    ],
    runtime: Runtime,
) -> WriteOutcome | Observation:
    """Transfer the customer to a human agent, with a summary of their issue.

    Only transfer if the customer explicitly asks for a human agent, or if their request
    cannot be handled with the available tools and policy. After the transfer, tell the
    customer they are being transferred and stop.
    """
    context = context_of(runtime)
    thread_id = context.thread_id if context else ""
    return await run_write(
        deps.pool,
        runtime,
        tool_name="transfer_to_human_agents",
        args={"summary": summary},
        action_for=lambda c: handoff_action(c, thread_id, summary),
        needs_customer=False,
    )


TOOLS = (transfer_to_human_agents,)
