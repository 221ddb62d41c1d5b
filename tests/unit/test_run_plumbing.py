"""The small pieces a turn's speed rests on: state updates that carry only changes, the
bookkeeping applied before the model call, and SSE batching."""

from __future__ import annotations

import asyncio

from langchain_core.messages import AIMessage, HumanMessage, RemoveMessage, ToolMessage

from app.agent.cache import tags_for
from app.agent.state import AgentState, applied, changes_only
from app.api.sse import merged_tokens
from app.runs.service import Run


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
        assert changes_only(state(), {"stale_rounds": 0}) == {"stale_rounds": 0}


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
    def test_adjacent_tokens_merge_and_other_events_keep_their_place(self) -> None:
        batch = [
            ("tool_result", {"id": "c1"}),
            ("token", {"text": "Your "}),
            ("token", {"text": "order "}),
            ("token", {"text": "shipped."}),
            ("citations", {"citations": []}),
            ("token", {"text": "!"}),
        ]
        assert merged_tokens(batch) == [
            ("tool_result", {"id": "c1"}),
            ("token", {"text": "Your order shipped."}),
            ("citations", {"citations": []}),
            ("token", {"text": "!"}),
        ]

    async def test_a_batch_is_everything_queued_and_the_end_marker_ends_it(self) -> None:
        run = Run(run_id="r", thread_id="u:s", session_id="s")
        for i in range(3):
            run.queue.put_nowait(("token", {"text": str(i)}))
        batches = run.batches()
        assert await anext(batches) == [("token", {"text": str(i)}) for i in range(3)]

        async def later() -> None:
            await asyncio.sleep(0.01)
            run.queue.put_nowait(("done", {"status": "completed"}))
            run.queue.put_nowait(None)

        task = asyncio.create_task(later())
        assert await anext(batches) == [("done", {"status": "completed"})]
        assert [b async for b in batches] == []
        await task


class TestCacheTags:
    def test_ids_are_found_at_any_depth_of_a_result(self) -> None:
        content = (
            '{"order_id": "#W1", "user_id": "u1", "payment_history": [{"payment_method_id": '
            '"credit_card_9"}], "items": [{"product_id": 77, "options": {"color": "red"}}]}'
        )
        assert tags_for({"order_id": "#W1"}, content, "u1") == {
            "order:#W1",
            "user:u1",
            "pm:credit_card_9",
            "product:77",
        }
