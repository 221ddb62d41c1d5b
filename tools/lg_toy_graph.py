"""Toy graphs shaped like cs-agent's turns, for `langgraph dev` in tools/lg_conformance.py.

`graph`: the agent asks for a write, a confirm node interrupts with a human-in-the-loop
request, the write runs once approved, and the agent streams its answer token by token.
`lookup`: a read, as cs-agent's read tools run (a ToolNode, so the `tools` stream mode
reports it), then a streamed answer. They run in the conformance script's own virtualenv
(langgraph-cli[inmem]), never in cs-agent's."""

from __future__ import annotations

import json
from collections.abc import Iterator
from typing import Any

from langchain_core.language_models import BaseChatModel
from langchain_core.language_models.fake_chat_models import GenericFakeChatModel
from langchain_core.messages import AIMessage, AIMessageChunk, ToolMessage
from langchain_core.messages.tool import tool_call_chunk
from langchain_core.outputs import ChatGenerationChunk
from langchain_core.tools import tool
from langgraph.config import get_stream_writer
from langgraph.graph import END, START, MessagesState, StateGraph
from langgraph.prebuilt import ToolNode
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


@tool
def get_order_details(order_id: str) -> str:
    """The order's details."""
    return json.dumps({"order_id": order_id, "status": "pending"})


class CallingModel(BaseChatModel):
    """Streams one tool call, as a tool-calling model does (the fake chat models of
    langchain_core stream text only)."""

    @property
    def _llm_type(self) -> str:
        return "toy-calling"

    def _generate(self, messages: Any, stop: Any = None, run_manager: Any = None, **_: Any) -> Any:
        raise NotImplementedError("streamed only")

    def _stream(
        self, messages: Any, stop: Any = None, run_manager: Any = None, **_: Any
    ) -> Iterator[ChatGenerationChunk]:
        piece = tool_call_chunk(
            name="get_order_details", args=json.dumps({"order_id": ORDER}), id="call_2", index=0
        )
        chunk = ChatGenerationChunk(message=AIMessageChunk(content="", tool_call_chunks=[piece]))
        if run_manager is not None:
            run_manager.on_llm_new_token("", chunk=chunk)
        yield chunk


def lookup_agent(state: MessagesState) -> dict[str, Any]:
    last = state["messages"][-1]
    if last.type == "human":
        return {"messages": [CallingModel().invoke(state["messages"])]}
    model = GenericFakeChatModel(messages=iter([f"Your order {ORDER} is pending."]))
    return {"messages": [model.invoke(state["messages"])]}


def route_read(state: MessagesState) -> str:
    return "read_tools" if getattr(state["messages"][-1], "tool_calls", None) else END


reads = StateGraph(MessagesState)
reads.add_node("agent", lookup_agent)
reads.add_node("read_tools", ToolNode([get_order_details]))
reads.add_edge(START, "agent")
reads.add_conditional_edges("agent", route_read, ["read_tools", END])
reads.add_edge("read_tools", "agent")
lookup = reads.compile()
