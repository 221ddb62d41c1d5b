"""Edits of a thread's state from outside the graph's own steps: the turn a cancel cut, and
what a run does first on a thread a dead run left. The agent node opens a turn and cuts an
answer with the same two functions, so a turn looks the same however it was opened or cut.
"""

from __future__ import annotations

from collections.abc import Sequence
from typing import TYPE_CHECKING, Any

import structlog
from langchain_core.messages import AIMessage, AnyMessage, BaseMessage, HumanMessage
from langchain_core.runnables import RunnableConfig

from app.agent.ports import WriteLedger
from app.agent.repair import close_dangling
from app.agent.state import fresh_turn_fields

if TYPE_CHECKING:  # graph.py builds the nodes, which use this module
    from app.agent.graph import Graph

log = structlog.get_logger(__name__)

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


async def leave_consistent(
    graph: Graph,
    config: RunnableConfig,
    *,
    thread_id: str,
    partial: str,
    partial_id: str | None = None,
    ledger: WriteLedger | None,
    write_names: frozenset[str],
) -> None:
    """After a cancel: every tool call of the run gets its result (a write's recorded
    outcome, or "interrupted, not executed"), and the answer being written stays as far as
    it got, marked as cut, under the id it streamed with; so the next turn starts clean."""
    try:
        snapshot = await graph.aget_state(config)
        values = snapshot.values or {}
        messages: list[AnyMessage] = values.get("messages") or []
        closed: list[Any] = []
        if ledger is not None:
            closed = await close_dangling(
                messages,
                thread_id=thread_id,
                turn_id=values.get("turn_id"),
                write_names=write_names,
                ledger=ledger,
            )
        cut = cut_answer(partial)
        if partial_id:  # the id its tokens streamed under: a client merges by it
            cut.id = partial_id
        update: dict[str, Any] = {"messages": [*closed, cut]}
        incoming = values.get("incoming")
        if incoming is not None:  # cancelled before its turn was opened: open it now
            update = open_turn(incoming, int(values.get("turn_number") or 0), closed)
            update["messages"].append(cut)
        await graph.aupdate_state(config, update, as_node="agent")
    except Exception:
        log.exception("could not close a cancelled run's steps", thread_id=thread_id)


async def store_messages(
    graph: Graph,
    config: RunnableConfig,
    messages: Sequence[BaseMessage],
    *,
    handed_back: bool = False,
) -> None:
    """Add messages to the conversation with no step and no model call: the customer's and
    a person's while a person holds the thread (as the `staff` node, which nothing follows).
    A message whose id is stored already replaces itself: a retry adds nothing. When a
    person hands the thread back, the handoff ends in the state too, so the state (and the
    prompt of the next turn) no longer says a person has the conversation."""
    update: dict[str, Any] = {"messages": list(messages)}
    if handed_back:
        update["handed_off"] = False
    await graph.aupdate_state(config, update, as_node="staff")


async def recovery_inputs(graph: Graph, config: RunnableConfig, human: HumanMessage) -> list[Any]:
    """What a run does on a thread a dead run left, before (or instead of) its message.

    A step the dead run had begun is finished first: the graph goes on from the stored
    checkpoint (input None), so an approved write that did not commit runs now, once (its
    idempotency key is the same), and one that did commit replays its record. If the
    message is the very one that dead run was answering (a retry with the same
    client_message_id), that finishes its turn, and it is not added a second time."""
    snapshot = await graph.aget_state(config)
    values = snapshot.values or {}
    unfinished = bool(snapshot.next) and not snapshot.interrupts
    inputs: list[Any] = [None] if unfinished else []
    waiting = values.get("incoming")  # stored, its turn not opened yet (the model failed)
    if human.id not in (values.get("turn_id"), waiting.id if waiting is not None else None):
        inputs.append({"incoming": human})
    if unfinished:
        thread_id = config["configurable"]["thread_id"]
        log.warning("finishing a step a dead run left", thread_id=thread_id, next=snapshot.next)
    return inputs
