"""The window of messages the model sees. The checkpoint always keeps everything."""

from __future__ import annotations

from collections.abc import Callable, Sequence

from langchain_core.messages import (
    AIMessage,
    BaseMessage,
    HumanMessage,
    SystemMessage,
    ToolMessage,
    trim_messages,
)
from langchain_core.messages.utils import count_tokens_approximately


def count_tokens(messages: Sequence[BaseMessage]) -> int:
    return count_tokens_approximately(messages)


class _CountOnce:
    """`count_tokens` for one trim: `trim_messages` counts ~2 log n prefixes of the window
    (a binary search), which recounted every message each time: on a long working list
    that was most of the cost of trimming. The count is a per-message sum, so each message
    is counted once. The memo keeps the message itself, so its `id` stays unique.

    A counter object rather than a function: `trim_messages` calls a model-like counter's
    `get_num_tokens_from_messages` directly, where for a plain function it first reads the
    function's signature with `inspect` on every call (py-spy under load: ~1% of a read
    turn's CPU; ~5 us a call alone)."""

    def __init__(self) -> None:
        self._memo: dict[int, tuple[BaseMessage, int]] = {}

    def __call__(self, messages: Sequence[BaseMessage]) -> int:
        total = 0
        for m in messages:
            known = self._memo.get(id(m))
            if known is None:
                known = self._memo[id(m)] = (m, count_tokens_approximately([m]))
            total += known[1]
        return total

    get_num_tokens_from_messages = __call__


def counting_each_once() -> Callable[[Sequence[BaseMessage]], int]:
    return _CountOnce()


def well_paired(messages: Sequence[BaseMessage]) -> list[BaseMessage]:
    """Drop tool results whose request is missing and tool requests whose results are.

    OpenAI rejects both with a 400, so the window must never hold either.
    """
    requested: set[str] = set()
    answered: set[str] = set()
    for m in messages:
        if isinstance(m, AIMessage):
            requested.update(c["id"] for c in m.tool_calls if c["id"])
        elif isinstance(m, ToolMessage) and m.tool_call_id in requested:
            answered.add(m.tool_call_id)
    keep: list[BaseMessage] = []
    dropped_calls: set[str] = set()
    for m in messages:
        if isinstance(m, AIMessage) and m.tool_calls:
            ids = {c["id"] for c in m.tool_calls if c["id"]}
            if not ids <= answered or len(ids) != len(m.tool_calls):
                dropped_calls |= ids
                continue
        if isinstance(m, ToolMessage) and (
            m.tool_call_id not in answered or m.tool_call_id in dropped_calls
        ):
            continue
        keep.append(m)
    return keep


def _groups_after(messages: Sequence[BaseMessage]) -> list[list[BaseMessage]]:
    """Split into units that must stay together: an AI message with its tool results."""
    groups: list[list[BaseMessage]] = []
    for m in messages:
        if isinstance(m, ToolMessage) and groups:
            groups[-1].append(m)
        else:
            groups.append([m])
    return groups


def model_window(
    system: SystemMessage, history: Sequence[BaseMessage], max_tokens: int
) -> list[BaseMessage]:
    """System prompt plus the newest messages that fit `max_tokens`, starting on a human turn."""
    history = well_paired(history)
    count = counting_each_once()
    window = trim_messages(
        [system, *history],
        max_tokens=max_tokens,
        token_counter=count,
        strategy="last",
        start_on="human",
        include_system=True,
        allow_partial=False,
    )
    if any(isinstance(m, HumanMessage) for m in window):
        return well_paired(window)
    # The current turn alone is over budget: keep its question and the newest whole
    # request/result groups that still fit, so the model can continue the turn.
    last_human = max(
        (i for i, m in enumerate(history) if isinstance(m, HumanMessage)), default=None
    )
    if last_human is None:
        return [system]
    budget = max_tokens - count([system, history[last_human]])
    tail: list[BaseMessage] = []
    for group in reversed(_groups_after(history[last_human + 1 :])):
        cost = count(group)
        if cost > budget:
            break
        tail = group + tail
        budget -= cost
    return well_paired([system, history[last_human], *tail])
