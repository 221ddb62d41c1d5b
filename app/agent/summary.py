"""Long conversations: fold the oldest part of the working messages into one summary.

The summary reaches the model through the system prompt; the folded messages move to the
transcript archive, so nothing the person saw is ever lost. A window is only cut in front
of a user message, so an assistant tool call is never separated from its results.
"""

from __future__ import annotations

import re
from collections.abc import Sequence
from dataclasses import dataclass
from typing import Any, Protocol

import structlog
from langchain_core.language_models import BaseChatModel
from langchain_core.messages import (
    AIMessage,
    BaseMessage,
    HumanMessage,
    RemoveMessage,
    SystemMessage,
    ToolMessage,
)
from langgraph.runtime import Runtime

from app.agent.llm import model_call_deadline, require_finished
from app.agent.state import AgentState
from app.agent.trimming import count_tokens
from app.config import Settings
from app.identity import AgentContext

log = structlog.get_logger(__name__)

SUMMARY_SYSTEM = (
    "You summarise customer-service conversations for the agent who continues them. Write at "
    "most 12 short lines. Keep VERBATIM every order id, user id, email, payment method id, "
    "amount, date and name, the verified customer, what was done (changes made, refunds) and "
    "anything promised or still pending. No greetings, no advice."
)
FACT_PATTERNS = (
    r"#W\d{7}",
    r"\b(?:credit_card|gift_card|paypal)_\d+\b",
    r"\b[a-z]+_[a-z]+_\d{4}\b",
    r"\b[\w.+-]+@[\w-]+\.[\w.]+\b",
    r"\b\d{4}-\d{2}-\d{2}\b",
    r"\b\d{1,3}(?:,\d{3})*\.\d{2}\b",
)
TOOL_TEXT_LIMIT = 1200


class TranscriptArchive(Protocol):
    async def append(self, thread_id: str, start: int, messages: Sequence[BaseMessage]) -> None: ...


def cut_point(messages: Sequence[BaseMessage], keep_tokens: int) -> int:
    """Index of the user message the kept part starts at; 0 when nothing can be folded."""
    starts = [i for i, m in enumerate(messages) if isinstance(m, HumanMessage)]
    fitting = [i for i in starts if count_tokens(messages[i:]) <= keep_tokens]
    if fitting:
        return fitting[0]
    return starts[-1] if starts else 0


def key_facts(messages: Sequence[BaseMessage]) -> list[str]:
    text = "\n".join(str(m.content) for m in messages)
    facts: dict[str, None] = {}
    for pattern in FACT_PATTERNS:
        for match in re.findall(pattern, text):
            facts.setdefault(match, None)
    return list(facts)


def with_facts(summary: str, facts: Sequence[str]) -> str:
    """The model's summary, plus any key fact it dropped, so ids and amounts survive as-is."""
    missing = [f for f in facts if f not in summary]
    return summary if not missing else f"{summary}\nKey facts: {', '.join(missing)}"


def transcript_text(previous: str | None, messages: Sequence[BaseMessage]) -> str:
    lines = [f"Earlier summary:\n{previous}\n"] if previous else []
    for m in messages:
        if isinstance(m, HumanMessage):
            lines.append(f"customer: {m.content}")
        elif isinstance(m, ToolMessage):
            lines.append(f"tool {m.name}: {str(m.content)[:TOOL_TEXT_LIMIT]}")
        elif isinstance(m, AIMessage):
            calls = ", ".join(f"{c['name']}({c['args']})" for c in m.tool_calls)
            lines.append(f"agent: {m.content}" + (f" [called {calls}]" if calls else ""))
    return "\n".join(lines)


@dataclass
class Summarizer:
    model: BaseChatModel
    settings: Settings
    archive: TranscriptArchive

    async def __call__(self, state: AgentState, runtime: Runtime[AgentContext]) -> dict[str, Any]:
        messages = state.get("messages") or []
        if count_tokens(messages) <= self.settings.summary_trigger_tokens:
            return {}
        cut = cut_point(messages, self.settings.summary_keep_tokens)
        if cut == 0:
            return {}
        folded = messages[:cut]
        previous = state.get("summary")
        try:
            # The agent's deadline, and a summary cut off half-way is no summary.
            async with model_call_deadline(self.settings.llm_call_deadline_s):
                reply = await self.model.ainvoke(
                    [
                        SystemMessage(content=SUMMARY_SYSTEM),
                        HumanMessage(content=transcript_text(previous, folded)),
                    ],
                    config={"tags": ["summarizer"]},
                )
            require_finished(reply)
            archived = state.get("archived_count", 0)
            await self.archive.append(runtime.context.thread_id, archived, folded)
        except Exception as error:
            # Keep every message and try again at the end of a later turn.
            log.warning("summary failed; keeping messages", error_type=type(error).__name__)
            return {"summary_failures": state.get("summary_failures", 0) + 1}
        facts = key_facts([*folded, HumanMessage(content=previous or "")])
        summary = with_facts(str(reply.content).strip(), facts)
        return {
            "messages": [RemoveMessage(id=m.id) for m in folded if m.id],
            "summary": summary,
            "archived_count": archived + len(folded),
        }
