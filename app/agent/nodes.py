"""The agent's nodes other than tool execution: turn start, model call, bookkeeping."""

from __future__ import annotations

import hashlib
import json
from dataclasses import dataclass
from typing import Any

import structlog
from langchain_core.language_models import BaseChatModel
from langchain_core.messages import AIMessage, BaseMessage, SystemMessage, ToolCall, ToolMessage
from langchain_core.runnables import Runnable
from langgraph.config import get_config
from langgraph.runtime import Runtime

from app.agent.cache import CACHED_NOTE, CacheEntry
from app.agent.cache import invalidated as cache_invalidated
from app.agent.cache import stored as cache_stored
from app.agent.cache import tags_for as cache_tags
from app.agent.citations import citations_from, is_stale_round
from app.agent.context import AgentContext
from app.agent.ports import WriteLedger
from app.agent.prompts import BUDGET_NOTE, reflection_note, system_prompt
from app.agent.repair import close_dangling
from app.agent.routing import (
    BREAKER_OPEN,
    CALL_CAP,
    INVALID_ARGS_KEY,
    blocked_calls,
    is_failure,
    last_ai,
    new_tool_results,
    updated_breakers,
)
from app.agent.state import AgentState, fresh_turn_fields
from app.agent.trimming import model_window
from app.config import Settings
from app.memory.store import list_preferences, preferences_prompt

log = structlog.get_logger(__name__)

BUDGET_SPENT = (
    "I'm sorry, this is taking me longer than it should. Here is where things stand: I could "
    "not finish your request in this reply. Could you tell me which part matters most, or "
    "shall I transfer you to a human colleague?"
)
REPEAT_HINT = "\n(Note: you already had this exact result earlier in this turn; do not ask again.)"


def fingerprint(name: str, args: Any, content: Any) -> str:
    raw = json.dumps([name, args, content], sort_keys=True, default=str)
    return hashlib.sha256(raw.encode()).hexdigest()[:16]


def with_invalid_calls_as_errors(message: BaseMessage) -> BaseMessage:
    """Turn calls whose JSON arguments did not parse into ordinary calls carrying a marker.

    ChatOpenAI puts them in `invalid_tool_calls`; left there they would be sent back to the
    API without results (a 400) and the model would never learn what it did wrong.
    """
    if not isinstance(message, AIMessage) or not message.invalid_tool_calls:
        return message
    repaired: list[ToolCall] = list(message.tool_calls)
    for i, bad in enumerate(message.invalid_tool_calls):
        repaired.append(
            ToolCall(
                name=bad.get("name") or "unknown_tool",
                args={INVALID_ARGS_KEY: str(bad.get("args") or "")[:500]},
                id=bad.get("id") or f"invalid_{message.id}_{i}",
            )
        )
    return message.model_copy(update={"tool_calls": repaired, "invalid_tool_calls": []})


@dataclass
class CoreNodes:
    model: BaseChatModel
    model_with_tools: Runnable[Any, BaseMessage]
    settings: Settings
    ledger: WriteLedger
    write_names: frozenset[str]

    async def start_turn(self, state: AgentState, runtime: Runtime[AgentContext]) -> dict[str, Any]:
        incoming = state.get("incoming")
        if incoming is None:
            return {}
        repairs = await close_dangling(
            state.get("messages") or [],
            thread_id=runtime.context.thread_id,
            turn_id=state.get("turn_id"),
            write_names=self.write_names,
            ledger=self.ledger,
        )
        turn = state.get("turn_number", 0) + 1
        return {
            "messages": [*repairs, incoming],
            "incoming": None,
            **fresh_turn_fields(str(incoming.id), turn),
        }

    async def agent(self, state: AgentState, runtime: Runtime[AgentContext]) -> dict[str, Any]:
        steps = state.get("turn_steps", 0)
        if steps >= self.settings.turn_step_budget:
            return {"messages": [AIMessage(content=BUDGET_SPENT)], "force_answer": "budget"}
        system = system_prompt(
            runtime.context,
            state.get("verified_user_id"),
            handed_off=bool(state.get("handed_off")),
            summary=state.get("summary"),
        )
        remembered = await self._preferences(runtime, state)
        if remembered:
            system = SystemMessage(content=f"{system.content}\n{remembered}")
        forced = state.get("force_answer") is not None
        if forced:
            system = SystemMessage(content=f"{system.content}\n{BUDGET_NOTE}")
        window = model_window(system, state.get("messages") or [], self.settings.context_max_tokens)
        every = self.settings.reflection_every
        if every and steps and steps % every == 0:
            window.append(SystemMessage(content=reflection_note(steps)))
        runnable: Runnable[Any, BaseMessage] = self.model if forced else self.model_with_tools
        response = await runnable.ainvoke(window, get_config())
        response = with_invalid_calls_as_errors(response)
        if forced and isinstance(response, AIMessage) and response.tool_calls:
            response = response.model_copy(update={"tool_calls": []})
        return {"messages": [response], "turn_steps": steps + 1}

    async def _preferences(self, runtime: Runtime[AgentContext], state: AgentState) -> str:
        ctx = runtime.context
        customer = ctx.user_id if ctx.role == "customer" else state.get("verified_user_id")
        if customer is None or runtime.store is None:
            return ""
        try:
            return preferences_prompt(await list_preferences(runtime.store, customer))
        except Exception:  # memory is a nicety; a turn never fails for it
            log.warning("could not read preferences")
            return ""

    async def blocked(self, state: AgentState) -> dict[str, Any]:
        ai = last_ai(state)
        assert ai is not None
        refused = blocked_calls(state, ai.tool_calls, self.settings)
        return {
            "messages": [
                ToolMessage(
                    content=refused.get(c["id"] or "", CALL_CAP.format(name=c["name"])),
                    tool_call_id=c["id"] or "",
                    name=c["name"],
                    status="error",
                )
                for c in ai.tool_calls
            ]
        }

    async def sanitize(self, state: AgentState, runtime: Runtime[AgentContext]) -> dict[str, Any]:
        """Read the results just added and keep the books: breakers, per-turn counts, the
        repeat guard, the tool-result cache, the citations ledger and the stagnation guard."""
        messages = state.get("messages") or []
        results = new_tool_results(messages)
        ai = next((m for m in reversed(messages) if isinstance(m, AIMessage)), None)
        args_by_id = {c["id"]: c["args"] for c in ai.tool_calls} if ai else {}
        counts = dict(state.get("turn_tool_calls") or {})
        repeats = dict(state.get("repeats") or {})
        rewritten: list[ToolMessage] = []
        force = state.get("force_answer")
        fresh = 0
        for msg in results:
            name = msg.name or ""
            if msg.content != BREAKER_OPEN.format(name=name):
                counts[name] = counts.get(name, 0) + 1
            raw = str(msg.content).removesuffix(CACHED_NOTE)
            key = fingerprint(name, args_by_id.get(msg.tool_call_id), raw)
            repeats[key] = repeats.get(key, 0) + 1
            # new content, whatever the arguments that produced it
            seen = "content:" + fingerprint(name, None, raw)
            repeats[seen] = repeats.get(seen, 0) + 1
            fresh += repeats[seen] == 1
            if repeats[key] == 2 and isinstance(msg.content, str):
                rewritten.append(msg.model_copy(update={"content": msg.content + REPEAT_HINT}))
            elif repeats[key] >= 3:
                force = "repeat"
        turn = state.get("turn_number", 0)
        known = state.get("citations") or []
        cited = citations_from(results, turn)
        stale = state.get("stale_rounds", 0) + 1 if is_stale_round(cited, known, fresh) else 0
        if stale >= self.settings.stagnation_rounds and force is None:
            force = "stagnation"
        breakers = updated_breakers(
            state.get("breakers") or {}, results, state.get("turn_number", 0), self.settings
        )
        ctx = runtime.context
        customer = ctx.user_id if ctx.role == "customer" else state.get("verified_user_id")
        tool_cache, stats = self._cache_update(state, results, args_by_id, customer)
        update: dict[str, Any] = {
            "tool_cache": tool_cache,
            "cache_stats": stats,
            "turn_tool_calls": counts,
            "repeats": repeats,
            "breakers": breakers,
            "force_answer": force,
            "stale_rounds": stale,
            "citations": cited,
        }
        if rewritten:
            update["messages"] = rewritten
        return update

    def _cache_update(
        self,
        state: AgentState,
        results: list[ToolMessage],
        args_by_id: dict[str | None, Any],
        customer: str | None,
    ) -> tuple[dict[str, CacheEntry], dict[str, int]]:
        entries = dict(state.get("tool_cache") or {})
        stats = dict(state.get("cache_stats") or {"hits": 0, "misses": 0})
        turn = state.get("turn_number", 0)
        for msg in results:
            name, args = msg.name or "", args_by_id.get(msg.tool_call_id) or {}
            marker = msg.additional_kwargs.get("cache")
            if marker == "hit":
                stats["hits"] = stats.get("hits", 0) + 1
            elif marker == "miss":
                stats["misses"] = stats.get("misses", 0) + 1
                entries = cache_stored(entries, name, args, str(msg.content), turn)
            elif name in self.write_names and not is_failure(msg):
                entries = cache_invalidated(entries, cache_tags(args, str(msg.content), customer))
        return entries, stats
