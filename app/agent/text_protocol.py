"""`TOOL_CALLING=react`: a chat model without native tool calling, made to look like one.

`TextToolCalling` wraps the model. Bound to tools, it sends the exchange as a plain-text
Thought/Action/Observation script with the tool list in the system prompt, reads the reply
back into tool calls or an answer (app/agent/react_protocol.py), asks again with a format
hint when it cannot (twice at most, then a polite give-up), and streams only the
customer-facing text of the reply. The graph and the run see the same messages, tool calls
and token stream as from a model with native tool calling.
"""

from __future__ import annotations

import json
import uuid
from collections.abc import AsyncIterator, Sequence
from dataclasses import dataclass
from typing import Any

from langchain_core.callbacks import AsyncCallbackManagerForLLMRun, CallbackManagerForLLMRun
from langchain_core.language_models import BaseChatModel
from langchain_core.messages import (
    AIMessage,
    AIMessageChunk,
    BaseMessage,
    HumanMessage,
    SystemMessage,
    ToolMessage,
    message_chunk_to_message,
)
from langchain_core.outputs import ChatGeneration, ChatGenerationChunk, ChatResult
from langchain_core.tools import BaseTool

from app.agent.llm import ModelReplyBroken, require_finished
from app.agent.model_view import text_of
from app.agent.react_protocol import (
    ActionStep,
    FinalAnswerFilter,
    Unparseable,
    format_error_observation,
    observation_text,
    parse_reply,
    render_tools_prompt,
    tool_arg_names,
)

FORMAT_GIVE_UP = (
    "I'm sorry, I had trouble working that out. Could you rephrase your request, or shall I "
    "transfer you to a human colleague?"
)
MAX_FORMAT_ERRORS = 2  # format corrections per model step
RAW_KEY = "react_raw"  # the model's own text for a step, kept for GET /state
THOUGHT_KEY = "thought"
MODEL_CALLS = "model_calls"  # response_metadata: calls of the wrapped model in this step


@dataclass(frozen=True)
class TextProtocol:
    """The tool list as text, for models without native tool calling."""

    prompt: str
    names: list[str]
    arg_names: dict[str, list[str]]

    @classmethod
    def for_tools(cls, tools: Sequence[BaseTool]) -> TextProtocol:
        return cls(render_tools_prompt(tools), [t.name for t in tools], tool_arg_names(tools))


class TextToolCalling(BaseChatModel):
    inner: BaseChatModel
    protocol: TextProtocol | None = None

    @property
    def _llm_type(self) -> str:
        return "text-tool-calling"

    def bind_tools(self, tools: Sequence[Any], **kwargs: Any) -> TextToolCalling:
        return self.model_copy(update={"protocol": TextProtocol.for_tools(tools)})

    def _generate(
        self,
        messages: list[BaseMessage],
        stop: list[str] | None = None,
        run_manager: CallbackManagerForLLMRun | None = None,
        **kwargs: Any,
    ) -> ChatResult:
        raise NotImplementedError("the text protocol runs async only")

    async def _agenerate(
        self,
        messages: list[BaseMessage],
        stop: list[str] | None = None,
        run_manager: AsyncCallbackManagerForLLMRun | None = None,
        **kwargs: Any,
    ) -> ChatResult:
        chunks = [c.message async for c in self._astream(messages, stop, run_manager, **kwargs)]
        merged = chunks[0] + chunks[1:] if len(chunks) > 1 else chunks[0]
        return ChatResult(generations=[ChatGeneration(message=message_chunk_to_message(merged))])

    async def _astream(
        self,
        messages: list[BaseMessage],
        stop: list[str] | None = None,
        run_manager: AsyncCallbackManagerForLLMRun | None = None,
        **kwargs: Any,
    ) -> AsyncIterator[ChatGenerationChunk]:
        protocol = self.protocol or TextProtocol("", [], {})
        script = as_text_script(messages, protocol.prompt)
        usage = {"input_tokens": 0, "output_tokens": 0, "total_tokens": 0}
        for calls in range(1, MAX_FORMAT_ERRORS + 2):
            answer = FinalAnswerFilter()
            pieces: list[Any] = []
            async for piece in self.inner.astream(script):
                pieces.append(piece)
                if shown := answer.feed(text_of(piece)):
                    yield _chunk(shown)
            if not pieces:
                raise ModelReplyBroken("nothing came back")
            merged = pieces[0] + pieces[1:] if len(pieces) > 1 else pieces[0]
            reply = require_finished(message_chunk_to_message(merged))
            for k, v in (getattr(reply, "usage_metadata", None) or {}).items():
                if k in usage and isinstance(v, int):
                    usage[k] += v
            text = text_of(reply)
            parsed = parse_reply(text, protocol.names, protocol.arg_names)
            if not isinstance(parsed, Unparseable):
                if rest := answer.flush():
                    yield _chunk(rest)
                kwargs_ = {RAW_KEY: text, THOUGHT_KEY: parsed.thought}
                yield _last(
                    usage, calls, kwargs_, parsed if isinstance(parsed, ActionStep) else None
                )
                return
            script = [
                *script,
                AIMessage(content=text),
                HumanMessage(content=format_error_observation(parsed.reason)),
            ]
        yield _chunk(FORMAT_GIVE_UP)
        yield _last(usage, calls, {RAW_KEY: text}, None)


def _chunk(text: str) -> ChatGenerationChunk:
    return ChatGenerationChunk(message=AIMessageChunk(content=text))


def _last(
    usage: dict[str, int], calls: int, kwargs: dict[str, Any], action: ActionStep | None
) -> ChatGenerationChunk:
    """The step's closing chunk: its tool call, the model's own text, usage, finish."""
    tool_calls = []
    if action is not None:
        call_id = f"react_{uuid.uuid4().hex[:12]}"
        args = json.dumps(action.args, ensure_ascii=False)
        tool_calls = [{"name": action.tool, "args": args, "id": call_id, "index": 0}]
    message = AIMessageChunk(
        content="",
        additional_kwargs=kwargs,
        tool_call_chunks=tool_calls,
        usage_metadata={**usage},
        response_metadata={"finish_reason": "tool_calls" if action else "stop", MODEL_CALLS: calls},
    )
    return ChatGenerationChunk(message=message)


def _step_text(message: AIMessage) -> str:
    raw = message.additional_kwargs.get(RAW_KEY)
    if isinstance(raw, str) and raw:
        return raw
    if message.tool_calls:
        call = message.tool_calls[0]
        return f"Action: {call['name']}\nAction Input: {json.dumps(call['args'])}"
    return f"Final Answer: {message.content}"


def as_text_script(messages: Sequence[BaseMessage], tools_prompt: str = "") -> list[BaseMessage]:
    """The window for a model without tool calling: no tool_calls, no tool role, and the
    tool list at the end of the (first) system prompt."""
    out: list[BaseMessage] = []
    for m in messages:
        if isinstance(m, AIMessage):
            out.append(AIMessage(content=_step_text(m)))
        elif isinstance(m, ToolMessage):
            out.append(HumanMessage(content=observation_text(m.name or "", str(m.content))))
        elif isinstance(m, SystemMessage) and tools_prompt:
            out.append(SystemMessage(content=f"{text_of(m)}\n{tools_prompt}"))
            tools_prompt = ""
        else:
            out.append(m)
    return out
