"""The demo model, in the service's own process: a LangChain chat model around the demo
policy, used when no real model is configured.

The graph uses it like any other chat model: `bind_tools` binds the tools' schemas, the
answer streams word by word at `DEMO_MODEL_TOKENS_PER_S`, tool calls arrive as tool-call
chunks, and every reply ends with a finish reason and its (estimated) token counts. The
policy is handed the request a hosted model would be sent (`ChatRequest`: OpenAI-style
message dicts and tool schemas), so it knows nothing of LangChain.
"""

from __future__ import annotations

import asyncio
import uuid
from collections.abc import AsyncIterator, Callable, Iterator, Sequence
from typing import Any

from langchain_core.callbacks import AsyncCallbackManagerForLLMRun, CallbackManagerForLLMRun
from langchain_core.language_models import BaseChatModel, LanguageModelInput
from langchain_core.messages import (
    AIMessage,
    AIMessageChunk,
    BaseMessage,
    convert_to_openai_messages,
    message_chunk_to_message,
)
from langchain_core.messages.tool import tool_call_chunk
from langchain_core.outputs import ChatGeneration, ChatGenerationChunk, ChatResult
from langchain_core.runnables import Runnable
from langchain_core.tools import BaseTool
from langchain_core.utils.function_calling import convert_to_openai_tool

from app.config import Settings
from app.demo.chat import ChatRequest, Reply, completion_tokens, prompt_tokens, split_words
from app.demo.policy import DemoPolicy

DEMO_MODEL_NAME = "demo"


class DemoChatModel(BaseChatModel):
    """Answers with `policy(request)`; stateless, so one instance serves every run."""

    policy: Callable[[ChatRequest], Reply]
    tokens_per_s: float | None = None  # None: as fast as possible
    model_name: str = DEMO_MODEL_NAME

    @property
    def _llm_type(self) -> str:
        return "cs-agent-demo"

    @property
    def _identifying_params(self) -> dict[str, Any]:
        return {"model_name": self.model_name}

    def bind_tools(
        self,
        tools: Sequence[dict[str, Any] | type | Callable[..., Any] | BaseTool],
        *,
        tool_choice: str | None = None,  # the policy decides whether to call a tool
        **kwargs: Any,
    ) -> Runnable[LanguageModelInput, AIMessage]:
        return self.bind(tools=[convert_to_openai_tool(t) for t in tools], **kwargs)

    def _generate(
        self,
        messages: list[BaseMessage],
        stop: list[str] | None = None,
        run_manager: CallbackManagerForLLMRun | None = None,
        **kwargs: Any,
    ) -> ChatResult:
        return _whole(self._chunks(messages, kwargs.get("tools")))

    async def _agenerate(
        self,
        messages: list[BaseMessage],
        stop: list[str] | None = None,
        run_manager: AsyncCallbackManagerForLLMRun | None = None,
        **kwargs: Any,
    ) -> ChatResult:
        # Not paced: nobody watches a reply that is not streamed.
        return _whole(self._chunks(messages, kwargs.get("tools")))

    async def _astream(
        self,
        messages: list[BaseMessage],
        stop: list[str] | None = None,
        run_manager: AsyncCallbackManagerForLLMRun | None = None,
        **kwargs: Any,
    ) -> AsyncIterator[ChatGenerationChunk]:
        pause = 1.0 / self.tokens_per_s if self.tokens_per_s else 0.0
        for i, chunk in enumerate(self._chunks(messages, kwargs.get("tools"))):
            if pause and i:
                await asyncio.sleep(pause)
            if run_manager is not None and chunk.text:
                await run_manager.on_llm_new_token(chunk.text, chunk=chunk)
            yield chunk

    def _chunks(self, messages: list[BaseMessage], tools: Any) -> Iterator[ChatGenerationChunk]:
        """The reply as a stream: its text word by word, each tool call, then the end."""
        request = ChatRequest(
            messages=convert_to_openai_messages(messages),
            tools=list(tools or []),
            model=self.model_name,
        )
        reply = self.policy(request)
        for word in split_words(reply.text):
            yield ChatGenerationChunk(message=AIMessageChunk(content=word))
        for index, call in enumerate(reply.tool_calls):
            piece = tool_call_chunk(
                name=call.name,
                args=call.arguments_json(),
                id=call.id or f"call_{uuid.uuid4().hex[:24]}",
                index=index,
            )
            yield ChatGenerationChunk(message=AIMessageChunk(content="", tool_call_chunks=[piece]))
        prompt, completion = prompt_tokens(request), completion_tokens(reply)
        last = AIMessageChunk(
            content="",
            response_metadata={
                "finish_reason": reply.resolved_finish_reason,
                "model_name": self.model_name,
            },
            usage_metadata={
                "input_tokens": prompt,
                "output_tokens": completion,
                "total_tokens": prompt + completion,
            },
            chunk_position="last",
        )
        yield ChatGenerationChunk(message=last)


def _whole(chunks: Iterator[ChatGenerationChunk]) -> ChatResult:
    first, *rest = chunks
    merged = first + rest if rest else first
    return ChatResult(
        generations=[ChatGeneration(message=message_chunk_to_message(merged.message))]
    )


def demo_chat_model(settings: Settings) -> DemoChatModel:
    """The demo model as the settings pace it (`DEMO_MODEL_TOKENS_PER_S`, 0: no pacing)."""
    return DemoChatModel(policy=DemoPolicy(), tokens_per_s=settings.demo_model_tokens_per_s or None)
