"""The model's window never splits a tool call from its results, whatever the history."""

from __future__ import annotations

from unittest import mock

from hypothesis import given, settings
from hypothesis import strategies as st
from langchain_core.messages import (
    AIMessage,
    BaseMessage,
    HumanMessage,
    SystemMessage,
    ToolMessage,
    trim_messages,
)

from app.agent.trimming import count_tokens, counting_each_once, model_window, well_paired

SYSTEM = SystemMessage(content="You are a shop assistant.")
words = st.text(alphabet="abcdefghij klmnop", min_size=0, max_size=300)


@st.composite
def histories(draw: st.DrawFn) -> list[BaseMessage]:
    out: list[BaseMessage] = []
    n = 0
    for _ in range(draw(st.integers(1, 8))):
        out.append(HumanMessage(content=draw(words) or "hi", id=f"h{n}"))
        n += 1
        for _ in range(draw(st.integers(0, 3))):
            k = draw(st.integers(1, 3))
            ids = [f"c{n}_{j}" for j in range(k)]
            out.append(
                AIMessage(
                    content="",
                    id=f"a{n}",
                    tool_calls=[
                        {"name": "get_order_details", "args": {"x": i}, "id": i} for i in ids
                    ],
                )
            )
            out.extend(
                ToolMessage(content=draw(words), tool_call_id=i, name="get_order_details")
                for i in ids
            )
            n += 1
        out.append(AIMessage(content=draw(words), id=f"a{n}"))
        n += 1
    if draw(st.booleans()):  # a dangling request at the end (a crash mid-turn)
        out.append(
            AIMessage(
                content="",
                id="dangling",
                tool_calls=[{"name": "cancel_pending_order", "args": {}, "id": "dangling_call"}],
            )
        )
    return out


def assert_well_formed(window: list[BaseMessage]) -> None:
    assert isinstance(window[0], SystemMessage)
    body = window[1:]
    if not body:
        return
    assert not isinstance(body[0], ToolMessage)
    requested = {c["id"] for m in body if isinstance(m, AIMessage) for c in m.tool_calls}
    answered = {m.tool_call_id for m in body if isinstance(m, ToolMessage)}
    assert answered <= requested, "a tool result without the message that asked for it"
    assert requested <= answered, "a tool call without its result"
    # each result follows the message that requested it
    seen: set[str | None] = set()
    for m in body:
        if isinstance(m, AIMessage):
            seen.update(c["id"] for c in m.tool_calls)
        if isinstance(m, ToolMessage):
            assert m.tool_call_id in seen


class TestWindowIsAlwaysWellFormed:
    @settings(max_examples=300, deadline=None)
    @given(history=histories(), budget=st.integers(50, 3000))
    def test_window_never_splits_calls_from_results(
        self, history: list[BaseMessage], budget: int
    ) -> None:
        window = model_window(SYSTEM, history, budget)
        assert_well_formed(window)

    @settings(max_examples=200, deadline=None)
    @given(history=histories(), budget=st.integers(50, 3000))
    def test_window_keeps_the_latest_question(
        self, history: list[BaseMessage], budget: int
    ) -> None:
        window = model_window(SYSTEM, history, budget)
        last_human = [m for m in history if isinstance(m, HumanMessage)][-1]
        assert last_human in window

    @settings(max_examples=200, deadline=None)
    @given(history=histories(), budget=st.integers(50, 3000))
    def test_window_is_a_subsequence_of_history(
        self, history: list[BaseMessage], budget: int
    ) -> None:
        window = model_window(SYSTEM, history, budget)
        positions = [history.index(m) for m in window[1:]]
        assert positions == sorted(positions)


class TestBudget:
    def test_long_history_is_cut_to_the_budget(self) -> None:
        history: list[BaseMessage] = []
        for i in range(200):
            history += [HumanMessage(content=f"question {i} " * 20), AIMessage(content="ok " * 40)]
        window = model_window(SYSTEM, history, 1000)
        assert count_tokens(window) <= 1000
        assert window[-1] is history[-1]
        assert len(history) == 400  # the history itself is untouched

    def test_the_trim_reads_no_signature(self) -> None:
        # `trim_messages` inspects a plain function counter on every call; ours is an object
        # it calls directly (a hot path: twice a read turn)
        history: list[BaseMessage] = [HumanMessage(content="where is my order?")]
        with mock.patch("inspect.signature", side_effect=AssertionError("signature read")):
            assert model_window(SYSTEM, history, 1000)[-1] is history[-1]

    @settings(max_examples=200, deadline=None)
    @given(history=histories(), data=st.data())
    def test_counting_each_once_counts_what_count_tokens_counts(
        self, history: list[BaseMessage], data: st.DataObject
    ) -> None:
        count = counting_each_once()
        for _ in range(3):  # repeated and overlapping slices, as a binary search asks
            start = data.draw(st.integers(0, len(history)))
            end = data.draw(st.integers(start, len(history)))
            assert count(history[start:end]) == count_tokens(history[start:end])

    @settings(max_examples=200, deadline=None)
    @given(history=histories(), budget=st.integers(50, 3000))
    def test_the_window_is_the_one_a_plain_count_gives(
        self, history: list[BaseMessage], budget: int
    ) -> None:
        plain = trim_messages(
            [SYSTEM, *well_paired(history)],
            max_tokens=budget,
            token_counter=count_tokens,
            strategy="last",
            start_on="human",
            include_system=True,
            allow_partial=False,
        )
        if any(isinstance(m, HumanMessage) for m in plain):
            assert model_window(SYSTEM, history, budget) == well_paired(plain)
