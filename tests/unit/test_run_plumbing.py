"""The small pieces a turn's speed rests on: state updates that carry only changes, the
bookkeeping applied before the model call, and SSE batching."""

from __future__ import annotations

import asyncio
from typing import Any

from langchain_core.messages import AIMessage, HumanMessage, RemoveMessage, ToolMessage

from app.agent.cache import tags_of
from app.agent.state import AgentState, applied, changes_only
from app.runs.run import Run
from app.runs.stream import (
    Citations,
    Done,
    Token,
    ToolResult,
    frame,
    from_record,
    merged_tokens,
    to_record,
)
from app.tools.render import order_ids


def state() -> AgentState:
    return AgentState(
        messages=[HumanMessage("hi", id="h1"), AIMessage("", id="a1")],
        turn_number=3,
        turn_steps=1,
        repeats={},
        citations=[{"id": "returns", "title": "Returns", "snippet": "", "turn": 2}],
    )


class TestChangesOnly:
    def test_unchanged_fields_are_left_out(self) -> None:
        update = {"turn_number": 3, "turn_steps": 2, "repeats": {}, "force_answer": None}
        assert changes_only(state(), update) == {"turn_steps": 2}

    def test_reducer_channels_are_kept_only_when_they_add_something(self) -> None:
        message = AIMessage("ok", id="a2")
        cited = [{"id": "returns", "title": "Returns", "snippet": "", "turn": 3}]
        assert changes_only(state(), {"messages": [], "citations": []}) == {}
        assert changes_only(state(), {"messages": [message], "citations": cited}) == {
            "messages": [message],
            "citations": cited,
        }

    def test_a_field_set_for_the_first_time_is_kept(self) -> None:
        assert changes_only(state(), {"stale_rounds": 1}) == {"stale_rounds": 1}
        assert changes_only(state(), {"turn_id": "h1"}) == {"turn_id": "h1"}

    def test_a_first_value_that_reads_as_unset_is_left_out(self) -> None:
        # what a new thread's first turn resets: the readers' defaults, so no rows
        update = {"stale_rounds": 0, "handed_off": False, "cache_stats": {"hits": 0, "misses": 0}}
        assert changes_only(state(), update) == {}
        # once the state has a field, going back to the default is a change
        assert changes_only(AgentState(stale_rounds=2), {"stale_rounds": 0}) == {"stale_rounds": 0}


class TestApplied:
    def test_messages_and_citations_go_through_their_reducers(self) -> None:
        before = state()
        rewritten = AIMessage("edited", id="a1")
        result = ToolMessage("done", tool_call_id="c1", id="t1")
        cited = [{"id": "shipping", "title": "Shipping", "snippet": "", "turn": 3}]
        after = applied(before, {"messages": [rewritten, result], "citations": cited})
        assert [(m.id, m.content) for m in after["messages"]] == [
            ("h1", "hi"),
            ("a1", "edited"),
            ("t1", "done"),
        ]
        assert [c["id"] for c in after["citations"]] == ["returns", "shipping"]
        assert [m.id for m in before["messages"]] == ["h1", "a1"]  # the input is not changed

    def test_removals_apply_and_plain_fields_overwrite(self) -> None:
        after = applied(state(), {"messages": [RemoveMessage(id="h1")], "turn_steps": 5})
        assert [m.id for m in after["messages"]] == ["a1"]
        assert after["turn_steps"] == 5

    def test_no_update_is_the_same_state(self) -> None:
        before = state()
        assert applied(before, {}) is before


class TestSseBatching:
    def test_adjacent_tokens_merge_under_the_last_id_and_other_events_keep_their_place(
        self,
    ) -> None:
        result = ToolResult(id="c1", name="get_order_details", status="ok", content="{}")
        cited = Citations(citations=[])
        batch = [
            (1, result),
            (2, Token(text="Your ")),
            (3, Token(text="order ")),
            (4, Token(text="shipped.")),
            (5, cited),
            (6, Token(text="!")),
        ]
        assert merged_tokens(batch) == [
            (1, result),
            (4, Token(text="Your order shipped.")),
            (5, cited),
            (6, Token(text="!")),
        ]

    def test_a_frame_carries_the_id_the_name_and_the_fields_without_the_name(self) -> None:
        assert frame(7, Token(text="héllo")) == (
            'id: 7\r\nevent: token\r\ndata: {"text":"héllo"}\r\n\r\n'.encode()
        )

    def test_a_stored_event_reads_back_as_the_same_model(self) -> None:
        done = Done(status="completed", checkpoint_id="c", usage={"input_tokens": 3})
        assert from_record(to_record(9, done)) == (9, done)

    async def test_a_batch_is_everything_appended_and_done_ends_it(self) -> None:
        run = Run(run_id="r", thread_id="u:s", session_id="s")
        for i in range(3):
            run.emit(Token(text=str(i)))
            run.take(0)  # delivered: the next token starts an event of its own
        batches = run.follow()
        assert await anext(batches) == [(i + 1, Token(text=str(i))) for i in range(3)]
        late_reader = run.follow(after=2)

        async def later() -> None:
            await asyncio.sleep(0.01)
            run.emit(Done(status="completed"))

        task = asyncio.create_task(later())
        assert await anext(batches) == [(4, Done(status="completed"))]
        assert [b async for b in batches] == []
        assert [b async for b in late_reader] == [
            [(3, Token(text="2")), (4, Done(status="completed"))]
        ]
        await task


class TestTokenMerging:
    def test_tokens_no_reader_has_taken_are_one_event(self) -> None:
        run = Run(run_id="r", thread_id="u:s", session_id="s")
        for text in ("Your ", "order ", "shipped."):
            run.emit(Token(text=text))
        assert run.log == [(1, Token(text="Your order shipped."))]

    async def test_a_token_after_a_read_starts_a_new_event_and_ids_stay_dense(self) -> None:
        run = Run(run_id="r", thread_id="u:s", session_id="s")
        run.emit(Token(text="Your "))
        reader = run.follow()
        assert await anext(reader) == [(1, Token(text="Your "))]
        run.emit(Token(text="order "))
        run.emit(Token(text="shipped."))
        run.emit(Done(status="completed"))
        assert await anext(reader) == [
            (2, Token(text="order shipped.")),
            (3, Done(status="completed")),
        ]

    def test_other_events_are_never_merged(self) -> None:
        run = Run(run_id="r", thread_id="u:s", session_id="s")
        call = ToolResult(id="c1", name="get_order_details", status="ok", content="{}")
        run.emit(Token(text="a"))
        run.emit(call)
        run.emit(Token(text="b"))
        assert run.log == [(1, Token(text="a")), (2, call), (3, Token(text="b"))]


class TestFrames:
    """SSE_FRAME_MS: a token after a token waits a little for the next ones to join it."""

    async def paced(self, run: Run, texts: list[str], every_s: float) -> None:
        for text in texts:
            await asyncio.sleep(every_s)
            run.emit(Token(text=text))
        run.emit(Done(status="completed"))

    async def test_tokens_at_40_a_second_go_two_a_frame_and_the_first_at_once(self) -> None:
        run = Run(run_id="r", thread_id="u:s", session_id="s")
        words = [f"w{i} " for i in range(12)]
        loop = asyncio.get_running_loop()
        started = loop.time()
        model = asyncio.create_task(self.paced(run, words, 0.025))
        frames: list[tuple[float, list[Any]]] = []
        async for batch in run.follow(frame_s=0.03):
            frames.append((loop.time() - started, batch))
        await model
        tokens = [e for _, b in frames for _, e in b if isinstance(e, Token)]
        assert "".join(t.text for t in tokens) == "".join(words)  # nothing lost or reordered
        assert len(tokens) <= 8  # about half of 12 (timer slack allowed)
        assert frames[0][1] == [(1, Token(text="w0 "))]
        assert frames[0][0] < 0.025 + 0.02  # the first token did not wait for company
        ids = [seq for _, b in frames for seq, _ in b]
        assert ids == list(range(1, len(ids) + 1))

    async def test_done_ends_the_wait_at_once(self) -> None:
        run = Run(run_id="r", thread_id="u:s", session_id="s")
        reader = run.follow(frame_s=5.0)
        run.emit(Token(text="a"))
        assert await anext(reader) == [(1, Token(text="a"))]
        run.emit(Token(text="b"))
        run.emit(Done(status="completed"))
        batch = await asyncio.wait_for(anext(reader), 1.0)  # not 5 s
        assert batch == [(2, Token(text="b")), (3, Done(status="completed"))]

    async def test_without_a_frame_time_each_token_goes_as_it_comes(self) -> None:
        run = Run(run_id="r", thread_id="u:s", session_id="s")
        model = asyncio.create_task(self.paced(run, ["a", "b", "c", "d"], 0.02))
        batches = [b async for b in run.follow()]
        await model
        tokens = [e for b in batches for _, e in b if isinstance(e, Token)]
        assert [t.text for t in tokens] == ["a", "b", "c", "d"]  # each token its own event


class TestCacheTags:
    def test_an_order_is_about_its_customer_payment_methods_and_products(self) -> None:
        view = {
            "order_id": "#W1",
            "user_id": "u1",
            "payment_history": [{"payment_method_id": "credit_card_9"}],
            "items": [{"product_id": 77, "options": {"color": "red"}}],
        }
        assert tags_of(order_ids(view)) == {
            "order:#W1",
            "user:u1",
            "pm:credit_card_9",
            "product:77",
        }
