"""A toy graph shaped like cs-agent's turn, for `langgraph dev` in tools/lg_conformance.py:
the agent asks for a write, a confirm node interrupts with a human-in-the-loop request, the
write runs once approved, and the agent streams its answer token by token. It runs in the
conformance script's own virtualenv (langgraph-cli[inmem]), never in cs-agent's."""

from __future__ import annotations

from typing import Any

from langchain_core.language_models.fake_chat_models import GenericFakeChatModel
from langchain_core.messages import AIMessage, ToolMessage
from langgraph.config import get_stream_writer
from langgraph.graph import END, START, MessagesState, StateGraph
from langgraph.types import interrupt

ORDER = "#W6295317"


def agent(state: MessagesState) -> dict[str, Any]:
    last = state["messages"][-1]
    if last.type == "human":
        call = {"name": "cancel_pending_order", "args": {"order_id": ORDER}, "id": "call_1"}
        return {"messages": [AIMessage(content="", tool_calls=[call])]}
    model = GenericFakeChatModel(messages=iter([f"Done: order {ORDER} is cancelled."]))
    get_stream_writer()({"type": "citations", "citations": []})
    return {"messages": [model.invoke(state["messages"])]}


def confirm(state: MessagesState) -> dict[str, Any]:
    call = state["messages"][-1].tool_calls[0]  # type: ignore[union-attr]
    answer = interrupt(
        {
            "action_requests": [
                {"name": call["name"], "args": call["args"], "description": f"Cancel {ORDER}"}
            ],
            "review_configs": [
                {"action_name": call["name"], "allowed_decisions": ["approve", "reject"]}
            ],
        }
    )
    decision = answer["decisions"][0]["type"]
    content = "cancelled" if decision == "approve" else "declined"
    return {"messages": [ToolMessage(content=content, tool_call_id=call["id"], name=call["name"])]}


def route(state: MessagesState) -> str:
    last = state["messages"][-1]
    return "confirm" if getattr(last, "tool_calls", None) else END


builder = StateGraph(MessagesState)
builder.add_node("agent", agent)
builder.add_node("confirm", confirm)
builder.add_edge(START, "agent")
builder.add_conditional_edges("agent", route, ["confirm", END])
builder.add_edge("confirm", "agent")
graph = builder.compile()
