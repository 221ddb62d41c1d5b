"""The agent node's edits of its messages: how a person's messages read to the model, a turn
opened, an answer cut. The runs use the same two functions when they repair a cancelled
turn from outside the graph (app/runs/surgery.py), so a turn looks the same however it was
opened or cut.
"""

from __future__ import annotations

from collections.abc import Sequence
from typing import Any

from langchain_core.messages import AIMessage, AnyMessage, BaseMessage, HumanMessage

from app.agent.state import fresh_turn_fields

STAFF_AUTHOR = "staff"  # additional_kwargs["author"] of a message a person wrote


def for_model(messages: Sequence[AnyMessage]) -> list[AnyMessage]:
    """The conversation as the model reads it: a person's messages (a member of staff who
    took the thread over) say who wrote them and to whom, so the model never takes them
    for the customer's words or its own."""
    if not any(m.additional_kwargs.get("author") == STAFF_AUTHOR for m in messages):
        return list(messages)
    out: list[AnyMessage] = []
    for m in messages:
        if m.additional_kwargs.get("author") != STAFF_AUTHOR:
            out.append(m)
            continue
        who = m.additional_kwargs.get("author_name") or "a member of staff"
        if m.additional_kwargs.get("kind") == "note":
            text = f"[Note for you from {who} (support team), handing the conversation back]"
        else:
            text = f"[{who} (support team) wrote to the customer while holding the conversation]"
        out.append(HumanMessage(content=f"{text}: {m.text}", id=m.id))
    return out


def cut_answer(text: str) -> AIMessage:
    """The answer as far as it got when its run was cancelled, marked as cut. A tool call
    the model had begun to write is dropped: half a call is no call."""
    return AIMessage(
        content=f"{text} …" if text else "", response_metadata={"finish_reason": "cancelled"}
    )


def open_turn(
    incoming: BaseMessage, turn_number: int, before: Sequence[BaseMessage] = ()
) -> dict[str, Any]:
    """The update that moves the waiting message into the conversation (after `before`:
    repairs of the last turn's unanswered calls) and resets the turn's counters."""
    return {
        "messages": [*before, incoming],
        "incoming": None,
        **fresh_turn_fields(str(incoming.id), turn_number + 1),
    }
