"""A model call's chunks, past LangChain's callback layer when nobody listens to it.

`BaseChatModel.astream` wraps the model's own stream in callback bookkeeping: it configures
a callback manager, formats every message of the window for a tracer, reports each chunk,
and merges all chunks a second time for `on_llm_end`. With no handler, no tracer and no
hook that bookkeeping goes nowhere, and it was about a fifth of a model call's CPU (py-spy
under load: ~1 ms of a 15 ms read turn). When the call has listeners (LangSmith tracing,
a handler in the config, `set_debug`, a registered configure hook) the chunks come from
`astream` as before, so every promise about tracing holds.

The direct path repeats the two things `astream` does to each chunk that callers see: the
generation's info (`finish_reason`, `model_name`) goes into `response_metadata`, and the
stream ends on a chunk marked `chunk_position="last"`. tests/unit/test_model_stream.py
checks that both paths give the same merged message.
"""

from __future__ import annotations

import os
from collections.abc import AsyncIterator, Sequence
from typing import Any

from langchain_core.callbacks import BaseCallbackManager
from langchain_core.globals import get_debug
from langchain_core.messages import AIMessageChunk, BaseMessage, BaseMessageChunk
from langchain_core.runnables import Runnable, RunnableBinding, RunnableConfig
from langchain_core.tracers import context as tracer_context
from langchain_openai.chat_models.base import BaseChatOpenAI
from langsmith.utils import tracing_is_enabled

# `astream` drops this key of a generation's info (langchain_core.utils._gateway).
_GATEWAY_KEY = "lc_gateway_metadata"


async def model_chunks(
    runnable: Runnable[Any, BaseMessage], messages: Sequence[BaseMessage], config: RunnableConfig
) -> AsyncIterator[BaseMessageChunk]:
    direct = _direct_call(runnable, messages, config)
    if direct is None:
        async for chunk in runnable.astream(list(messages), config):
            yield chunk  # type: ignore[misc]  # a chat model streams message chunks
        return
    model, kwargs = direct
    last: BaseMessageChunk | None = None
    async for generation in model._astream(list(messages), stop=None, **kwargs):
        last = generation.message
        if generation.generation_info:
            info = {k: v for k, v in generation.generation_info.items() if k != _GATEWAY_KEY}
            last.response_metadata = {**info, **last.response_metadata}
        yield last
    if isinstance(last, AIMessageChunk) and not last.chunk_position:
        yield AIMessageChunk(content="", chunk_position="last", id=last.id)


def _direct_call(
    runnable: Runnable[Any, BaseMessage], messages: Sequence[BaseMessage], config: RunnableConfig
) -> tuple[BaseChatOpenAI, dict[str, Any]] | None:
    """The ChatOpenAI model and its bound arguments, when its own stream can be called
    directly; None when anything could be listening or the input needs LangChain's
    conversions (content blocks rather than text)."""
    kwargs: dict[str, Any] = {}
    if isinstance(runnable, RunnableBinding):
        if runnable.config or runnable.config_factories:
            return None
        kwargs, runnable = dict(runnable.kwargs), runnable.bound
    if not isinstance(runnable, BaseChatOpenAI):
        return None
    model = runnable
    if model.callbacks or model.verbose or model.rate_limiter or model.output_version == "v1":
        return None
    if not all(isinstance(m.content, str) for m in messages):
        return None
    return (model, kwargs) if _nobody_listens(config) else None


def _nobody_listens(config: RunnableConfig) -> bool:
    callbacks = config.get("callbacks")
    if isinstance(callbacks, BaseCallbackManager):
        if callbacks.handlers or callbacks.inheritable_handlers:
            return False
    elif callbacks:
        return False
    if get_debug() or tracing_is_enabled() or tracer_context.tracing_v2_callback_var.get():
        return False
    # Handlers a library registered to switch on from a context variable or the environment.
    # A private list: if a LangChain release drops it, every call takes `astream` again
    # rather than every turn failing on the attribute.
    hooks = getattr(tracer_context, "_configure_hooks", None)
    if not isinstance(hooks, list):
        return False
    for var, _, handler_class, env_var in hooks:
        if var.get() is not None or (handler_class and env_var and os.environ.get(env_var)):
            return False
    return True
