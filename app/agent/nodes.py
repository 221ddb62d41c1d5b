"""The agent's nodes other than tool execution: turn start, model call, bookkeeping."""

from __future__ import annotations

import hashlib
import json
from collections.abc import Sequence
from dataclasses import dataclass
from typing import Any

import structlog
from langchain_core.language_models import BaseChatModel
from langchain_core.messages import (
    AIMessage,
    BaseMessage,
    HumanMessage,
    SystemMessage,
    ToolCall,
    ToolMessage,
    message_chunk_to_message,
)
from langchain_core.runnables import Runnable
from langchain_core.tools import BaseTool
from langgraph.config import get_config, get_stream_writer
from langgraph.runtime import Runtime

from app.agent.cache import CACHED_NOTE, REPEAT_HINT, CacheEntry
from app.agent.cache import invalidated as cache_invalidated
from app.agent.cache import stored as cache_stored
from app.agent.cache import tags_for as cache_tags
from app.agent.citations import citations_from
from app.agent.llm import ModelReplyBroken, model_call_deadline, require_finished
from app.agent.model_view import RAW_KEY, as_text_script, formatted, from_text_reply, text_of
from app.agent.ports import WriteLedger
from app.agent.prompts import BUDGET_NOTE, reflection_note, system_prompt
from app.agent.react_protocol import format_error_observation, render_tools_prompt, tool_arg_names
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
from app.agent.state import AgentState, applied, changes_only, fresh_turn_fields
from app.agent.trimming import model_window
from app.config import Settings
from app.fencing import stop_requested
from app.identity import AgentContext, conversation_customer
from app.memory.store import list_preferences, preferences_prompt

log = structlog.get_logger(__name__)

BUDGET_SPENT = (
    "I'm sorry, this is taking me longer than it should. Here is where things stand: I could "
    "not finish your request in this reply. Could you tell me which part matters most, or "
    "shall I transfer you to a human colleague?"
)
FORMAT_GIVE_UP = (
    "I'm sorry, I had trouble working that out. Could you rephrase your request, or shall I "
    "transfer you to a human colleague?"
)
MAX_FORMAT_ERRORS = 2  # format corrections per turn for the text protocol
TOKEN_KEY = "token"  # a custom stream item {"token": text, "message_id": id}: answer text


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


async def streamed(
    runnable: Runnable[Any, BaseMessage], window: list[BaseMessage], *, deadline_s: float
) -> BaseMessage:
    """Call the model and hand each piece of its text to the run's stream as it arrives.

    The run reads these from LangGraph's `custom` stream rather than its `messages` mode:
    that mode hooks a callback handler into every runnable of the graph to catch tokens,
    which cost about 5 ms of CPU per turn, an eighth of the graph's own cost.

    The whole call has `deadline_s`, and a reply the model did not finish raises: either
    way the node fails, so nothing it streamed is stored, and the run ends with an error.
    """
    if stop_requested():  # cancelled: the turn ends here, at a step boundary
        return cut_answer([])
    write = get_stream_writer()
    chunks: list[Any] = []
    async with model_call_deadline(deadline_s):
        async for chunk in runnable.astream(window, get_config()):
            chunks.append(chunk)
            if text := text_of(chunk):
                write({TOKEN_KEY: text, "message_id": chunk.id})
            if stop_requested():  # cancelled mid-stream: closing the stream stops the model
                return cut_answer(chunks)
    if not chunks:
        raise ModelReplyBroken("nothing came back")
    merged = chunks[0] + chunks[1:] if len(chunks) > 1 else chunks[0]
    return require_finished(message_chunk_to_message(merged))


@dataclass(frozen=True)
class TextProtocol:
    """The tool list as text, for models without native tool calling."""

    prompt: str
    names: list[str]
    arg_names: dict[str, list[str]]

    @classmethod
    def for_tools(cls, tools: Sequence[BaseTool]) -> TextProtocol:
        return cls(render_tools_prompt(tools), [t.name for t in tools], tool_arg_names(tools))


def cut_answer(chunks: list[Any]) -> AIMessage:
    """The answer as far as it got when its run was cancelled, marked as cut. A tool call
    the model had begun to write is dropped: half a call is no call."""
    text = "".join(text_of(chunk) for chunk in chunks)
    return AIMessage(
        content=f"{text} …" if text else "", response_metadata={"finish_reason": "cancelled"}
    )


@dataclass
class CoreNodes:
    model: BaseChatModel
    model_with_tools: Runnable[Any, BaseMessage]
    settings: Settings
    ledger: WriteLedger
    write_names: frozenset[str]
    text_protocol: TextProtocol

    async def agent(self, state: AgentState, runtime: Runtime[AgentContext]) -> dict[str, Any]:
        """Open the turn or keep the books of the tool round just finished, then call the
        model. One node, so an order lookup costs three supersteps (agent, tools, agent), not
        six: each superstep is a checkpoint write and a scheduler tick."""
        if state.get("incoming") is not None:
            books = await self._open_turn(state, runtime)
        elif new_tool_results(state.get("messages") or []):
            books = self._keep_books(state, runtime)
        else:
            books = {}
        step = await self._model_step(applied(state, books), runtime)
        messages = [*books.get("messages", []), *step["messages"]]
        return changes_only(state, {**books, **step, "messages": messages})

    async def _open_turn(self, state: AgentState, runtime: Runtime[AgentContext]) -> dict[str, Any]:
        """Move the new message into the conversation, after closing any tool calls the last
        turn left without results (so repairs land before it), and reset the turn's counters."""
        incoming = state.get("incoming")
        assert incoming is not None
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

    async def _model_step(
        self, state: AgentState, runtime: Runtime[AgentContext]
    ) -> dict[str, Any]:
        steps = state.get("turn_steps", 0)
        if steps >= self.settings.turn_step_budget:
            return {"messages": [AIMessage(content=BUDGET_SPENT)], "force_answer": "budget"}
        forced = state.get("force_answer") is not None
        remembered, memo = await self._preferences(runtime, state)
        system = self._system(state, runtime, remembered, forced=forced)
        window = model_window(system, state.get("messages") or [], self.settings.context_max_tokens)
        if self.settings.observation_format == "text":
            window = formatted(window)
        every = self.settings.reflection_every
        if every and steps and steps % every == 0:
            window.append(SystemMessage(content=reflection_note(steps)))
        if self.settings.tool_calling == "react":
            return {**await self._text_protocol_step(window, state, forced=forced), **memo}
        runnable: Runnable[Any, BaseMessage] = self.model if forced else self.model_with_tools
        response = await streamed(runnable, window, deadline_s=self.settings.llm_call_deadline_s)
        response = with_invalid_calls_as_errors(response)
        if forced and isinstance(response, AIMessage) and response.tool_calls:
            response = response.model_copy(update={"tool_calls": []})
        return {"messages": [response], "turn_steps": steps + 1, **memo}

    def _system(
        self, state: AgentState, runtime: Runtime[AgentContext], remembered: str, *, forced: bool
    ) -> SystemMessage:
        parts = [
            str(
                system_prompt(
                    runtime.context,
                    state.get("verified_user_id"),
                    handed_off=bool(state.get("handed_off")),
                    summary=state.get("summary"),
                ).content
            )
        ]
        if remembered:
            parts.append(remembered)
        if self.settings.tool_calling == "react":
            parts.append(self.text_protocol.prompt)
        if forced:
            parts.append(BUDGET_NOTE)
        return SystemMessage(content="\n".join(parts))

    async def _text_protocol_step(
        self, window: list[BaseMessage], state: AgentState, *, forced: bool
    ) -> dict[str, Any]:
        """One model step for a model without tool calling, with up to two format fixes."""
        script = as_text_script(window)
        steps = state.get("turn_steps", 0)
        errors = state.get("format_errors", 0)
        usage = {"input_tokens": 0, "output_tokens": 0, "total_tokens": 0}
        while True:
            reply = await streamed(self.model, script, deadline_s=self.settings.llm_call_deadline_s)
            steps += 1
            for k, v in (getattr(reply, "usage_metadata", None) or {}).items():
                if k in usage and isinstance(v, int):
                    usage[k] += v
            text = text_of(reply)
            parsed = from_text_reply(text, self.text_protocol.names, self.text_protocol.arg_names)
            if isinstance(parsed, AIMessage):
                if forced and parsed.tool_calls:
                    parsed = AIMessage(
                        content=BUDGET_SPENT, additional_kwargs=parsed.additional_kwargs
                    )
                message = parsed.model_copy(update={"id": reply.id, "usage_metadata": usage})
                return {"messages": [message], "turn_steps": steps, "format_errors": errors}
            errors += 1
            if errors > MAX_FORMAT_ERRORS or steps >= self.settings.turn_step_budget:
                give_up = AIMessage(
                    content=FORMAT_GIVE_UP,
                    id=reply.id,
                    additional_kwargs={RAW_KEY: text},
                    usage_metadata=usage,
                )
                return {"messages": [give_up], "turn_steps": steps, "format_errors": errors}
            script = [
                *script,
                AIMessage(content=text),
                HumanMessage(content=format_error_observation(parsed.reason)),
            ]

    async def _preferences(
        self, runtime: Runtime[AgentContext], state: AgentState
    ) -> tuple[str, dict[str, Any]]:
        """The customer's remembered preferences, read from the store once per turn (and again
        if a guest verifies mid-turn); the text is kept in state for the turn's other steps."""
        customer = conversation_customer(runtime.context, state.get("verified_user_id"))
        if customer is None or runtime.store is None:
            return "", {}
        key = f"{state.get('turn_id')}|{customer}"
        memo = state.get("preferences") or {}
        if memo.get("key") == key:
            return str(memo.get("text", "")), {}
        try:
            text = preferences_prompt(await list_preferences(runtime.store, customer))
        except Exception:  # memory is a nicety; a turn never fails for it
            log.warning("could not read preferences")
            return "", {}
        return text, {"preferences": {"key": key, "text": text}}

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

    def _keep_books(self, state: AgentState, runtime: Runtime[AgentContext]) -> dict[str, Any]:
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
        cited = citations_from(results, turn)
        # A round that taught nothing: every result already seen this turn (an article read
        # again is then one already in the citations ledger, too).
        stale = state.get("stale_rounds", 0) + 1 if fresh == 0 else 0
        if stale >= self.settings.stagnation_rounds and force is None:
            force = "stagnation"
        breakers = updated_breakers(
            state.get("breakers") or {}, results, state.get("turn_number", 0), self.settings
        )
        customer = conversation_customer(runtime.context, state.get("verified_user_id"))
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
