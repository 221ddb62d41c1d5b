"""What the model is sent, as opposed to what the thread stores.

State keeps raw tool results (the API and the page show them). The model gets them as
compact text (`OBSERVATION_FORMAT=text`), and, for models without native tool calling
(`TOOL_CALLING=react`), the whole exchange as a plain-text Thought/Action/Observation script.
"""

from __future__ import annotations

import json
import uuid
from collections.abc import Sequence
from functools import lru_cache

from langchain_core.messages import AIMessage, BaseMessage, HumanMessage, ToolCall, ToolMessage

from app.agent.cache import without_notes
from app.agent.observations import format_observation
from app.agent.react_protocol import (
    ActionStep,
    FinalAnswer,
    Unparseable,
    observation_text,
    parse_reply,
)

# Tools whose results the model needs whole: an article body (cut at 2,000 by its tool) and
# the variant list it must pick item ids from.
OBSERVATION_LIMITS = {"get_help_article": 2400, "get_product_details": 4000}
DEFAULT_LIMIT = 1500
RAW_KEY = "react_raw"  # the model's own text for a step, kept for GET /state
THOUGHT_KEY = "thought"


def text_of(message: BaseMessage) -> str:
    """A message's text, whether its content is a string or a list of content blocks."""
    content = message.content
    if isinstance(content, str):
        return content
    parts = []
    for block in content:
        if isinstance(block, str):
            parts.append(block)
        elif isinstance(block, dict) and block.get("type") == "text":
            parts.append(str(block.get("text", "")))
    return "".join(parts)


@lru_cache(maxsize=1024)
def _rendered(tool_name: str, raw: str, limit: int) -> str:
    """A pure function of a result that never changes once it is in the thread, while the
    window shows every result again on each model call: a long thread would render the same
    forty results on every step."""
    return format_observation(tool_name, raw, limit=limit)


def formatted(messages: Sequence[BaseMessage]) -> list[BaseMessage]:
    """Tool results rendered for reading; everything else unchanged."""
    out: list[BaseMessage] = []
    for m in messages:
        if isinstance(m, ToolMessage) and isinstance(m.content, str):
            raw, notes = without_notes(m.content)
            name = m.name or ""
            text = _rendered(name, raw, OBSERVATION_LIMITS.get(name, DEFAULT_LIMIT)) + notes
            out.append(m.model_copy(update={"content": text}))
        else:
            out.append(m)
    return out


def _step_text(message: AIMessage) -> str:
    raw = message.additional_kwargs.get(RAW_KEY)
    if isinstance(raw, str) and raw:
        return raw
    if message.tool_calls:
        call = message.tool_calls[0]
        return f"Action: {call['name']}\nAction Input: {json.dumps(call['args'])}"
    return f"Final Answer: {message.content}"


def as_text_script(messages: Sequence[BaseMessage]) -> list[BaseMessage]:
    """The window for a model without tool calling: no tool_calls, no tool role."""
    out: list[BaseMessage] = []
    for m in messages:
        if isinstance(m, AIMessage):
            out.append(AIMessage(content=_step_text(m)))
        elif isinstance(m, ToolMessage):
            out.append(HumanMessage(content=observation_text(m.name or "", str(m.content))))
        else:
            out.append(m)
    return out


def from_text_reply(
    text: str, tool_names: Sequence[str], arg_names: dict[str, list[str]]
) -> AIMessage | Unparseable:
    """The model's text as the same structured message native tool calling produces."""
    parsed = parse_reply(text, tool_names, arg_names)
    if isinstance(parsed, Unparseable):
        return parsed
    kwargs = {RAW_KEY: text, THOUGHT_KEY: parsed.thought}
    if isinstance(parsed, ActionStep):
        call = ToolCall(name=parsed.tool, args=parsed.args, id=f"react_{uuid.uuid4().hex[:12]}")
        return AIMessage(content="", tool_calls=[call], additional_kwargs=kwargs)
    assert isinstance(parsed, FinalAnswer)
    return AIMessage(content=parsed.text, additional_kwargs=kwargs)
