"""Graph-state surgery: edits of a thread's stored state from outside the graph's own steps.

The turn a cancel cut, what a run does first on a thread a dead run left, and the messages
stored with no run while a person holds the thread. They change the checkpoints the graph
left (`aupdate_state`), so they live with the runs that call them, not in the agent: the
agent node opens a turn and cuts an answer with the same two functions (app/agent/edits.py),
so a turn looks the same however it was opened or cut.
"""

from __future__ import annotations

from collections.abc import Sequence
from typing import Any

import structlog
from langchain_core.messages import AnyMessage, BaseMessage, HumanMessage
from langchain_core.runnables import RunnableConfig

from app.agent.edits import cut_answer, open_turn
from app.agent.graph import STAFF_NODE, Graph
from app.agent.ports import WriteLedger
from app.agent.repair import close_dangling

log = structlog.get_logger(__name__)


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
    await graph.aupdate_state(config, update, as_node=STAFF_NODE)


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
