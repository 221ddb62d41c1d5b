"""Handing the conversation over to a human agent."""

from __future__ import annotations

from typing import Annotated

from pydantic import Field

from app.db.writes import WriteAction, WriteOutcome
from app.tools import summaries
from app.tools.order_actions import handoff_action
from app.tools.results import Observation, failed_with, found
from app.tools.spec import PERSONAL, Confirm, write_tool
from app.tools.writing import Session

MAX_SUMMARY_CHARS = 2000


def handed_off(outcome: WriteOutcome) -> Observation:
    """A transfer that went through marks the conversation as handed over."""
    if not outcome.ok:
        return failed_with("refused", outcome.text)
    return found(outcome.text, changes={"handed_off": True})


@write_tool(
    label="Handing over to a human agent …",
    confirm=Confirm("Transfer the conversation to a human agent", args=summaries.handoff),
    outcome=handed_off,
    needs_customer=False,
    # The customer asked for a person (or the agent cannot help): asking them to approve
    # that is a needless step. It changes no order or account; its ticket is still a
    # write, recorded once per key like every other.
    asks=False,
    done="Handed over to a human agent",
)
def transfer_to_human_agents(
    session: Session,
    summary: Annotated[
        str,
        Field(
            max_length=MAX_SUMMARY_CHARS,
            description="A short summary of the customer's issue and what was already "
            "done, for the human agent.",
        ),
        PERSONAL,
    ],
) -> WriteAction:
    """Transfer the customer to a human agent, with a summary of their issue.

    Only transfer if the customer explicitly asks for a human agent, or if their request
    cannot be handled with the available tools and policy. After the transfer, tell the
    customer they are being transferred and stop.
    """
    return handoff_action(session.customer_id, session.thread_id, summary)


TOOLS = (transfer_to_human_agents,)
