"""The agent graph, built by a factory from its collaborators.

START -> agent --(route_after_agent)--> END (or summarize -> END on a long thread)
           ^      |-> read_tools  (parallel, ToolNode)  ---------.
           |      |-> confirm (interrupt) -> write_tools (serial) |
           |      '-> blocked (breaker refusals)  ----------------|
           '------------------------------------------------------'

The agent node opens the turn and keeps the books of each tool round (breakers, repeat
guard, cache, citations: app/agent/books.py) before it calls the model: every node is a
superstep and a checkpoint write, so the bookkeeping rides along with the model call.

With `TOOL_CALLING=react` the model is wrapped in `TextToolCalling`, which speaks the text
protocol to it and tool calls to the graph: nothing else knows.
"""

from __future__ import annotations

from collections.abc import AsyncIterator, Sequence
from typing import Any

from langchain_core.language_models import BaseChatModel
from langchain_core.runnables import RunnableConfig
from langchain_core.tools import BaseTool
from langgraph.checkpoint.base import BaseCheckpointSaver
from langgraph.graph import END, START, StateGraph
from langgraph.graph.state import CompiledStateGraph
from langgraph.store.base import BaseStore

from app.agent.nodes import CoreNodes
from app.agent.ports import WriteLedger
from app.agent.routing import Route, route_after_agent
from app.agent.state import AgentState
from app.agent.summary import Summarizer, TranscriptArchive
from app.agent.text_protocol import TextToolCalling
from app.agent.tool_exec import WriteNodes, build_read_node
from app.config import Settings
from app.identity import AgentContext
from app.tools.spec import ShopTool
from app.turn import Turn, current_turn

Graph = CompiledStateGraph[AgentState, AgentContext, Any, Any]
STAFF_NODE = "staff"


async def _nothing(state: AgentState) -> dict[str, Any]:
    return {}


def run_config(thread_id: str, settings: Settings) -> RunnableConfig:
    """Config for one run. Each model call costs up to three supersteps (agent, tools,
    bookkeeping), so the recursion limit follows the step budget: the budget, not
    LangGraph's recursion error, is what ends a runaway turn."""
    return {
        "configurable": {"thread_id": thread_id},
        "recursion_limit": settings.turn_step_budget * 3 + 10,
    }


def stream_turn(
    graph: Graph,
    graph_input: Any,
    config: RunnableConfig,
    context: AgentContext,
    turn: Turn | None = None,
) -> AsyncIterator[Any]:
    """One run: (mode, chunk) pairs of each step's updates, every checkpoint stored before
    the run returns (`durability="sync"`; `run_batching` decides when).

    The answer's tokens go to the turn's sink (`turn.tokens`, the service's run) straight
    from the agent node. Without one they come as `custom` chunks, as any LangGraph client
    reads them (the benchmarks' in-process graph and thin service, our yardsticks, do). The
    `custom` mode costs every chunk a `call_soon_threadsafe` wake-up, a new waiter task and
    an `asyncio.wait` over the step's tasks, and runs even a step of one node as a task of
    its own; without it LangGraph runs such a step inline. The agent node finds the turn in
    `current_turn`: the executor set it in the run's own task, whose context the graph's
    tasks copy (set here when it is not).
    """
    if turn is not None and current_turn.get() is not turn:
        current_turn.set(turn)
    sink = turn.tokens if turn is not None else None
    return graph.astream(
        graph_input,
        config,
        context=context,
        stream_mode=["custom", "updates"] if sink is None else ["updates"],
        durability="sync",
    )


def build_graph(
    *,
    model: BaseChatModel,
    read_tools: Sequence[BaseTool],
    write_tools: Sequence[BaseTool],
    checkpointer: BaseCheckpointSaver[Any] | None,
    settings: Settings,
    ledger: WriteLedger,
    store: BaseStore | None = None,
    archive: TranscriptArchive | None = None,
) -> Graph:
    fmt = settings.observation_format
    read_tools = [t.bound(fmt) if isinstance(t, ShopTool) else t for t in read_tools]
    write_tools = [t.bound(fmt) if isinstance(t, ShopTool) else t for t in write_tools]
    all_tools = [*read_tools, *write_tools]
    names = [t.name for t in all_tools]
    write_names = frozenset(t.name for t in write_tools)
    if settings.tool_calling == "react":
        # The tool list stays in the prompt when no more calls are wanted: the reply is
        # read the same way, and a call in it is dropped.
        with_tools = TextToolCalling(inner=model).bind_tools(all_tools)
        core = CoreNodes(with_tools, with_tools, settings, ledger, write_names)
    else:
        core = CoreNodes(model.bind_tools(all_tools), model, settings, ledger, write_names)
    writes = WriteNodes(
        tools={t.name: t for t in all_tools},
        write_names=write_names,
        settings=settings,
        ledger=ledger,
    )

    # async although it never awaits: LangGraph runs a plain function of an async graph in
    # a worker thread, a thread hop after every model call for a few comparisons.
    async def route(state: AgentState) -> Route:
        return route_after_agent(state, settings, write_names)

    g = StateGraph(AgentState, context_schema=AgentContext)
    g.add_node("agent", core.agent)
    g.add_node("read_tools", build_read_node(read_tools, names, settings))
    g.add_node("confirm", writes.confirm)
    g.add_node("write_tools", writes.write_tools)
    g.add_node("blocked", core.blocked)
    g.add_edge(START, "agent")
    g.add_conditional_edges(
        "agent",
        route,
        {
            "__end__": END,
            "summarize": "summarize" if archive is not None else END,
            "read_tools": "read_tools",
            "confirm": "confirm",
            "write_tools": "write_tools",
            "blocked": "blocked",
        },
    )
    g.add_edge("confirm", "write_tools")
    if archive is not None:
        g.add_node("summarize", Summarizer(model=model, settings=settings, archive=archive))
        g.add_edge("summarize", END)
    for node in ("read_tools", "write_tools", "blocked"):
        g.add_edge(node, "agent")
    # What a person who took the thread over writes (their messages, the customer's while
    # they hold it, the note they hand back with) is stored as this node's update, which
    # nothing follows: no step runs and no model is called (app/runs/surgery.py `store_messages`).
    g.add_node(STAFF_NODE, _nothing)
    g.add_edge(STAFF_NODE, END)
    return g.compile(checkpointer=checkpointer, store=store)
