"""The agent node (open the turn, or keep the books of the last tool round, then take the
model step) and the node that answers refused calls."""

from __future__ import annotations

import uuid
from dataclasses import dataclass
from typing import Any

import structlog
from langchain_core.messages import (
    AIMessage,
    BaseMessage,
    SystemMessage,
    ToolCall,
    message_chunk_to_message,
)
from langchain_core.runnables import Runnable
from langgraph.config import get_config, get_stream_writer
from langgraph.runtime import Runtime

from app.agent.books import keep_books, refused_calls
from app.agent.edits import cut_answer, for_model, open_turn
from app.agent.llm import ModelReplyBroken, model_call_deadline, require_finished
from app.agent.model_stream import model_chunks
from app.agent.model_view import text_of
from app.agent.ports import WriteLedger
from app.agent.prompts import BUDGET_NOTE, reflection_note, system_prompt
from app.agent.repair import close_dangling
from app.agent.routing import INVALID_ARGS_KEY, last_ai, new_tool_results, refusal_text
from app.agent.state import AgentState, applied, changes_only
from app.agent.text_protocol import MODEL_CALLS
from app.agent.trimming import model_window
from app.config import Settings
from app.identity import AgentContext, conversation_customer
from app.memory.store import list_preferences, preferences_prompt
from app.metrics import first_chunk, observed_model_call
from app.tools.results import failure, message
from app.turn import TokenSink, current_turn

log = structlog.get_logger(__name__)

BUDGET_SPENT = (
    "I'm sorry, this is taking me longer than it should. Here is where things stand: I could "
    "not finish your request in this reply. Could you tell me which part matters most, or "
    "shall I transfer you to a human colleague?"
)
TOKEN_KEY = "token"  # a custom stream item {"token": text, "message_id": id}: answer text
MESSAGE_ID_KEY = "message_id"


def _custom_stream() -> TokenSink:
    write = get_stream_writer()
    return lambda text, message_id: write({TOKEN_KEY: text, MESSAGE_ID_KEY: message_id})


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


@observed_model_call
async def streamed(
    runnable: Runnable[Any, BaseMessage], window: list[BaseMessage], *, deadline_s: float
) -> BaseMessage:
    """Call the model and hand each piece of its text to the run's stream as it arrives.

    Not LangGraph's `messages` mode: it hooks a callback handler into every runnable of the
    graph to catch tokens, which cost about 5 ms of CPU per turn, an eighth of the graph's
    own cost. The run's sink (its turn's `tokens`), when there is one; else the `custom`
    stream. A cancel (the turn's `control`) ends the answer where it is.

    The whole call has `deadline_s`, and a reply the model did not finish raises: either
    way the node fails, so nothing it streamed is stored, and the run ends with an error.
    """
    turn = current_turn.get()
    control = turn.control if turn is not None else None
    if control is not None and control.stop_requested:  # cancelled: ends at a step boundary
        return cut_answer("")
    write = (turn.tokens if turn is not None else None) or _custom_stream()
    chunks: list[Any] = []
    message_id = ""
    async with model_call_deadline(deadline_s):
        async for chunk in model_chunks(runnable, window, get_config()):
            if not chunks:
                first_chunk()  # the call's time to first token, when traced
                # The answer's id from its first piece on: every token carries it and the
                # stored message keeps it (merging chunks may prefer a later provider id),
                # so a client can merge what it streamed into the final state by id.
                message_id = chunk.id or f"lc_run--{uuid.uuid4()}"
            chunks.append(chunk)
            if text := text_of(chunk):
                write(text, message_id)
            # cancelled mid-stream: closing the stream stops the model
            if control is not None and control.stop_requested:
                cut = cut_answer("".join(text_of(c) for c in chunks))
                cut.id = message_id
                return cut
    if not chunks:
        raise ModelReplyBroken("nothing came back")
    merged = chunks[0] + chunks[1:] if len(chunks) > 1 else chunks[0]
    answer = require_finished(message_chunk_to_message(merged))
    answer.id = message_id
    return answer


@dataclass
class CoreNodes:
    # The model bound to the tools, and the model for a forced answer (no tools offered).
    model_with_tools: Runnable[Any, BaseMessage]
    answer_model: Runnable[Any, BaseMessage]
    settings: Settings
    ledger: WriteLedger
    write_names: frozenset[str]

    async def agent(self, state: AgentState, runtime: Runtime[AgentContext]) -> dict[str, Any]:
        """Open the turn or keep the books of the tool round just finished, then call the
        model. One node, so an order lookup costs three supersteps (agent, tools, agent), not
        six: each superstep is a checkpoint write and a scheduler tick."""
        if state.get("incoming") is not None:
            books = await self._open_turn(state, runtime)
        elif new_tool_results(state.get("messages") or []):
            books = keep_books(state, self.settings, self.write_names)
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
            customer_id=conversation_customer(runtime.context, state.get("verified_user_id")),
            observation_format=self.settings.observation_format,
        )
        return open_turn(incoming, state.get("turn_number", 0), repairs)

    async def _model_step(
        self, state: AgentState, runtime: Runtime[AgentContext]
    ) -> dict[str, Any]:
        steps = state.get("turn_steps", 0)
        if steps >= self.settings.turn_step_budget:
            budget = {"messages": [AIMessage(content=BUDGET_SPENT)], "force_answer": "budget"}
            return {**budget, **self._refused(state, [])}
        forced = state.get("force_answer") is not None
        remembered, memo = await self._preferences(runtime, state)
        system = self._system(state, runtime, remembered, forced=forced)
        messages = for_model(state.get("messages") or [])
        window = model_window(system, messages, self.settings.context_max_tokens)
        every = self.settings.reflection_every
        if every and steps and steps % every == 0:
            window.append(SystemMessage(content=reflection_note(steps)))
        runnable = self.answer_model if forced else self.model_with_tools
        response = await streamed(runnable, window, deadline_s=self.settings.llm_call_deadline_s)
        response = with_invalid_calls_as_errors(response)
        if forced and isinstance(response, AIMessage) and response.tool_calls:
            # told to answer, it called a tool anyway: no call, and words if it had none
            response = response.model_copy(
                update={"tool_calls": [], "content": response.content or BUDGET_SPENT}
            )
        calls = response.response_metadata.get(MODEL_CALLS, 1)
        tool_calls = response.tool_calls if isinstance(response, AIMessage) else []
        return {
            "messages": [response],
            "turn_steps": steps + (calls if isinstance(calls, int) else 1),
            **self._refused(state, tool_calls),
            **memo,
        }

    def _refused(self, state: AgentState, calls: list[ToolCall]) -> dict[str, Any]:
        """The calls of this reply the breakers refuse, decided once for routing and the
        tool nodes; left out of the update while it stays empty."""
        refused = refused_calls(state, calls, self.settings) if calls else {}
        return {"refused": refused} if refused or state.get("refused") else {}

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
        if forced:
            parts.append(BUDGET_NOTE)
        return SystemMessage(content="\n".join(parts))

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
        """Every call of a reply the breakers refused, answered with why."""
        ai = last_ai(state)
        assert ai is not None
        refused = state.get("refused") or {}
        answers = []
        for call in ai.tool_calls:
            kind = refused.get(call["id"] or "", "call_cap")
            answers.append(
                message(
                    refusal_text(kind, call["name"]),
                    failure("breaker_open" if kind == "breaker_open" else "call_cap"),
                    tool_call_id=call["id"] or "",
                    name=call["name"],
                )
            )
        return {"messages": answers}
