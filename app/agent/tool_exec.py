"""Tool execution: parallel reads through LangGraph's ToolNode, and the serial write node.

Every tool_call_id gets exactly one ToolMessage, whatever fails, with an artifact that says
how it went (app/tools/results.py). No exception text ever reaches the model: failures
become short error observations (app/tools/results.py writes them).
"""

from __future__ import annotations

from collections.abc import Awaitable, Callable, Sequence
from dataclasses import dataclass
from typing import Any

import structlog
from langchain_core.messages import ToolCall, ToolMessage
from langchain_core.runnables import RunnableConfig
from langchain_core.tools import BaseTool
from langgraph.config import get_config
from langgraph.prebuilt import ToolNode, ToolRuntime
from langgraph.prebuilt.tool_node import ToolCallRequest
from langgraph.runtime import Runtime
from langgraph.types import Command, interrupt
from pydantic import ValidationError

from app.agent import cache
from app.agent.ports import WriteLedger
from app.agent.routing import INVALID_ARGS_KEY, last_ai, refusal_text
from app.agent.state import AgentState
from app.config import Settings
from app.fencing import LeaseLost
from app.identity import AgentContext, conversation_customer
from app.metrics import tool_call, tool_result
from app.tools.results import (
    TOOL_FAILED,
    Artifact,
    error_text,
    failure,
    invalid_arguments,
    malformed_arguments,
    message,
    settled,
    validation_problems,
)

log = structlog.get_logger(__name__)

DECLINED = "Declined: the customer did not approve this change, so it was NOT made."


def unknown_tool(name: str, known: Sequence[str]) -> str:
    return error_text(f"there is no tool named {name!r}. Available tools: {', '.join(known)}.")


def handle_tool_error(error: Exception) -> str:
    # Validation errors name the bad field; anything else stays generic.
    if isinstance(error, ValidationError):
        return invalid_arguments(validation_problems(error))
    log.warning("tool raised", error_type=type(error).__name__)
    return TOOL_FAILED


def precheck(call: ToolCall, refused: dict[str, str], known: Sequence[str]) -> ToolMessage | None:
    """The observation for a call that must not run, or None when it may."""
    name, call_id = call["name"], call["id"] or ""
    if call_id in refused:
        kind = refused[call_id]
        content = refusal_text(kind, name)
        artifact = failure("breaker_open" if kind == "breaker_open" else "call_cap")
    elif name not in known:
        content, artifact = unknown_tool(name, known), failure("unknown_tool")
    elif INVALID_ARGS_KEY in call["args"]:
        content, artifact = malformed_arguments(name), failure("invalid_arguments")
    else:
        return None
    return message(content, artifact, tool_call_id=call_id, name=name)


def cached(call: ToolCall, entry: cache.CacheEntry) -> ToolMessage:
    """A result served from the conversation's cache (an entry from before artifacts says
    only that it was a success)."""
    kept = entry.get("artifact") or Artifact(outcome="ok", cacheable=True)
    return message(
        entry["content"] + cache.CACHED_NOTE,
        Artifact(**{**kept, "cache": "hit"}),
        tool_call_id=call["id"] or "",
        name=call["name"],
    )


def build_read_node(
    tools: Sequence[BaseTool], all_names: Sequence[str], settings: Settings
) -> ToolNode:
    async def guard(
        request: ToolCallRequest,
        execute: Callable[[ToolCallRequest], Awaitable[ToolMessage | Command[Any]]],
    ) -> ToolMessage | Command[Any]:
        state: AgentState = request.state
        call = request.tool_call
        early = precheck(call, state.get("refused") or {}, all_names)
        if early is not None:
            return early
        if settings.tool_cache_enabled:
            hit = cache.lookup(
                state.get("tool_cache") or {},
                call["name"],
                call["args"],
                state.get("turn_number", 0),
                settings.tool_cache_max_age_turns,
            )
            if hit is not None:
                return cached(call, hit)
        with tool_call(call["name"], call["id"], call["args"]) as span:
            result = await execute(request)
            tool_result(span, result)
        if not isinstance(result, ToolMessage):
            return result
        result = settled(result)
        artifact = result.artifact
        if artifact.get("cacheable") and artifact.get("outcome") == "ok":
            result.artifact = Artifact(**{**artifact, "cache": "miss"})  # type: ignore[typeddict-item]
        return result

    return ToolNode(list(tools), handle_tool_errors=handle_tool_error, awrap_tool_call=guard)


@dataclass
class WriteNodes:
    tools: dict[str, BaseTool]
    write_names: frozenset[str]
    settings: Settings
    ledger: WriteLedger

    async def confirm(self, state: AgentState, runtime: Runtime[AgentContext]) -> dict[str, Any]:
        """Pause for the customer's yes before any write that asks for it. A write whose rule
        refuses it as things are now is not offered: the model reads the refusal instead.
        Re-runs from the top on resume."""
        ai = last_ai(state)
        assert ai is not None
        refused = state.get("refused") or {}
        writes = [
            c
            for c in ai.tool_calls
            if c["name"] in self.write_names and precheck(c, refused, list(self.tools)) is None
        ]
        customer = conversation_customer(runtime.context, state.get("verified_user_id"))
        pending: list[dict[str, Any]] = []
        impossible: dict[str, str] = {}
        for c in writes:
            seen = await self.ledger.assess(customer, c["name"], dict(c["args"]))
            if seen.refusal is not None:
                impossible[c["id"] or ""] = seen.refusal
            elif seen.ask:
                pending.append(
                    {"id": c["id"], "name": c["name"], "args": c["args"], "summary": seen.summary}
                )
        update: dict[str, Any] = {"impossible": impossible} if impossible else {}
        if not pending:
            return {**update, "confirmation": "approve"}
        answer = interrupt({"pending": pending})
        decision = answer.get("decision") if isinstance(answer, dict) else answer
        return {**update, "confirmation": "approve" if decision == "approve" else "reject"}

    async def write_tools(
        self, state: AgentState, runtime: Runtime[AgentContext]
    ) -> dict[str, Any]:
        """Run every call of the message one at a time, in the order the model wrote them."""
        config = get_config()
        ai = last_ai(state)
        assert ai is not None
        refused = state.get("refused") or {}
        declined = self.settings.write_confirmation == "required" and (
            state.get("confirmation") != "approve"
        )
        impossible = state.get("impossible") or {}
        local: dict[str, Any] = dict(state)
        update: dict[str, Any] = {"impossible": {}} if impossible else {}
        results: list[ToolMessage] = []
        for call in ai.tool_calls:
            early = precheck(call, refused, list(self.tools))
            if early is not None:
                results.append(early)
                continue
            # A write the confirm step did not offer is recorded as its rule's refusal (the
            # tool reads `impossible`), whatever the customer said to the others.
            if declined and call["name"] in self.write_names and call["id"] not in impossible:
                results.append(
                    message(
                        DECLINED,
                        Artifact(outcome="declined"),
                        tool_call_id=call["id"] or "",
                        name=call["name"],
                    )
                )
                continue
            messages, changes = await self._run_one(call, local, runtime, config)
            results.extend(messages)
            local.update(changes)
            update.update(changes)
        return {**update, "messages": results, "confirmation": None}

    async def _run_one(
        self,
        call: ToolCall,
        state: dict[str, Any],
        runtime: Runtime[AgentContext],
        config: RunnableConfig,
    ) -> tuple[list[ToolMessage], dict[str, Any]]:
        tool = self.tools[call["name"]]
        tool_runtime = ToolRuntime(
            state=state,
            context=runtime.context,
            config=config,
            stream_writer=runtime.stream_writer,
            tool_call_id=call["id"],
            store=runtime.store,
        )
        invocation = ToolCall(
            name=call["name"],
            args={**call["args"], "runtime": tool_runtime},
            id=call["id"],
            type="tool_call",
        )
        try:
            with tool_call(call["name"], call["id"], call["args"]) as span:
                output = await tool.ainvoke(invocation, config)
                tool_result(span, output)
        except LeaseLost:
            raise  # the run lost its thread: it ends, no observation for the model
        except Exception as error:  # a tool must never break the run
            content = handle_tool_error(error)
            return [
                message(
                    content, failure("failed"), tool_call_id=call["id"] or "", name=call["name"]
                )
            ], {}
        if isinstance(output, Command):
            changes = dict(output.update) if isinstance(output.update, dict) else {}
            messages = [
                settled(m) for m in changes.pop("messages", []) if isinstance(m, ToolMessage)
            ]
            return messages, changes
        if isinstance(output, ToolMessage):
            return [settled(output)], {}
        return [
            settled(ToolMessage(str(output), tool_call_id=call["id"] or "", name=call["name"]))
        ], {}
