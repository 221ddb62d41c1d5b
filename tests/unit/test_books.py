"""The agent's books (app/agent/books.py): breakers, call caps, repeats, stagnation and the
cache, as pure functions of the state and a round's tool results (no graph, no database)."""

from __future__ import annotations

from collections.abc import Iterable
from typing import Any, cast

from langchain_core.messages import AIMessage, HumanMessage, ToolCall, ToolMessage
from prometheus_client import REGISTRY

from app.agent.books import (
    breaker_is_open,
    counted,
    keep_books,
    refused_calls,
    updated_breakers,
)
from app.agent.cache import CACHED_NOTE, REPEAT_HINT, cache_key
from app.agent.state import AgentState, Breaker
from app.config import Settings
from app.tools.results import Artifact, ErrorKind, failure

# Threshold 3, cool-down 2 turns, at most 4 calls of one tool in a turn, stagnation after 3.
SETTINGS = Settings(  # type: ignore[call-arg]
    breaker_failure_threshold=3,
    breaker_cooldown_turns=2,
    breaker_max_calls_per_turn=4,
    stagnation_rounds=3,
    _env_file=None,
)
LOOKUP = "get_order_details"
OTHER = "get_product_details"
WRITES = frozenset({"cancel_pending_order"})
CLOSED = Breaker(failures=0, opened_turn=None)


def result(
    name: str, artifact: Artifact | None = None, content: str = "ok", call_id: str = "c"
) -> ToolMessage:
    return ToolMessage(
        content=content,
        name=name,
        tool_call_id=call_id,
        artifact=artifact if artifact is not None else Artifact(outcome="ok"),
        status="error" if artifact and artifact.get("outcome") == "error" else "success",
    )


def failed(name: str, kind: ErrorKind = "not_found") -> ToolMessage:
    return result(name, failure(kind), content="no such order")


def after(
    results: Iterable[ToolMessage],
    turn: int,
    breakers: dict[str, Breaker] | None = None,
) -> dict[str, Breaker]:
    return updated_breakers(breakers or {}, results, turn, SETTINGS)


def call(name: str, call_id: str, **args: Any) -> ToolCall:
    return ToolCall(name=name, args=args, id=call_id, type="tool_call")


def trips(tool: str) -> float:
    return REGISTRY.get_sample_value("cs_agent_breaker_trips_total", {"tool": tool}) or 0.0


class TestBreakerOpens:
    def test_stays_closed_below_the_threshold(self) -> None:
        breakers = after([failed(LOOKUP), failed(LOOKUP)], turn=1)
        assert breakers[LOOKUP] == Breaker(failures=2, opened_turn=None)
        assert not breaker_is_open(breakers[LOOKUP], 1, SETTINGS)

    def test_opens_at_the_threshold_in_the_turn_of_the_failure(self) -> None:
        breakers = after([failed(LOOKUP), failed(LOOKUP)], turn=4)
        breakers = after([failed(LOOKUP)], turn=4, breakers=breakers)
        assert breakers[LOOKUP] == Breaker(failures=3, opened_turn=4)
        assert breaker_is_open(breakers[LOOKUP], 4, SETTINGS)

    def test_failures_must_be_consecutive(self) -> None:
        breakers = after([failed(LOOKUP), failed(LOOKUP), result(LOOKUP), failed(LOOKUP)], 1)
        assert breakers[LOOKUP] == Breaker(failures=1, opened_turn=None)

    def test_a_result_without_an_artifact_counts_by_its_status(self) -> None:
        bare = ToolMessage(content="boom", name=LOOKUP, tool_call_id="c", status="error")
        breakers = after([bare, bare, bare], turn=1)
        assert breakers[LOOKUP]["opened_turn"] == 1

    def test_a_declined_result_is_not_a_failure(self) -> None:
        declined = result(LOOKUP, Artifact(outcome="declined"))
        breakers = after(
            [declined], turn=1, breakers={LOOKUP: Breaker(failures=2, opened_turn=None)}
        )
        assert breakers[LOOKUP] == CLOSED

    def test_the_breakers_own_refusals_are_not_failures_of_the_tool(self) -> None:
        start = {LOOKUP: Breaker(failures=2, opened_turn=None)}
        refusals = [failed(LOOKUP, "breaker_open"), failed(LOOKUP, "call_cap")]
        assert after(refusals, turn=1, breakers=start) == start

    def test_tools_have_independent_breakers(self) -> None:
        breakers = after([failed(LOOKUP)] * 3 + [result(OTHER)], turn=1)
        assert breaker_is_open(breakers[LOOKUP], 1, SETTINGS)
        assert not breaker_is_open(breakers[OTHER], 1, SETTINGS)
        refused = refused_calls(
            AgentState(breakers=breakers, turn_number=1),
            [call(LOOKUP, "a"), call(OTHER, "b")],
            SETTINGS,
        )
        assert refused == {"a": "breaker_open"}

    def test_the_input_books_are_not_changed(self) -> None:
        start = {LOOKUP: Breaker(failures=1, opened_turn=None)}
        after([failed(LOOKUP)], turn=1, breakers=start)
        assert start == {LOOKUP: Breaker(failures=1, opened_turn=None)}


class TestBreakerCoolsDown:
    def test_open_for_the_cooldown_turns_counted_from_the_turn_it_opened(self) -> None:
        opened = Breaker(failures=3, opened_turn=5)
        open_in = [turn for turn in range(5, 10) if breaker_is_open(opened, turn, SETTINGS)]
        assert open_in == [5, 6]

    def test_no_breaker_or_a_closed_one_is_not_open(self) -> None:
        assert not breaker_is_open(None, 1, SETTINGS)
        assert not breaker_is_open(Breaker(failures=2, opened_turn=None), 1, SETTINGS)

    def test_half_open_one_success_closes_it(self) -> None:
        half_open = {LOOKUP: Breaker(failures=3, opened_turn=5)}
        assert after([result(LOOKUP)], turn=7, breakers=half_open)[LOOKUP] == CLOSED

    def test_half_open_one_failure_reopens_it_for_another_cooldown(self) -> None:
        half_open = {LOOKUP: Breaker(failures=3, opened_turn=5)}
        reopened = after([failed(LOOKUP)], turn=7, breakers=half_open)[LOOKUP]
        assert reopened == Breaker(failures=4, opened_turn=7)
        assert breaker_is_open(reopened, 8, SETTINGS)
        assert not breaker_is_open(reopened, 9, SETTINGS)


class TestBreakerTripMetric:
    def test_counts_one_trip_when_it_opens_and_none_for_more_failures_that_turn(self) -> None:
        tool = "books_metric_probe"
        before = trips(tool)
        breakers = after([failed(tool)] * 3, turn=1)
        assert trips(tool) == before + 1
        after([failed(tool)], turn=1, breakers=breakers)
        assert trips(tool) == before + 1
        after([failed(tool)], turn=3, breakers=breakers)  # half-open after the cool-down: reopens
        assert trips(tool) == before + 2

    def test_an_unknown_tool_never_counts_a_trip(self) -> None:
        tool = "books_unknown_probe"
        breakers = after([failed(tool, "unknown_tool")] * 3, turn=1)
        assert breakers[tool]["opened_turn"] == 1
        assert trips(tool) == 0


class TestCallCap:
    def test_calls_past_the_cap_in_one_reply_are_refused(self) -> None:
        calls = [call(LOOKUP, f"c{i}", order_id=f"#W{i}") for i in range(6)]
        refused = refused_calls(AgentState(turn_number=1), calls, SETTINGS)
        assert refused == {"c4": "call_cap", "c5": "call_cap"}

    def test_the_cap_counts_the_calls_made_earlier_in_the_turn(self) -> None:
        state = AgentState(turn_tool_calls={LOOKUP: 3, OTHER: 4}, turn_number=1)
        refused = refused_calls(state, [call(LOOKUP, "a"), call(LOOKUP, "b")], SETTINGS)
        assert refused == {"b": "call_cap"}

    def test_an_open_breaker_refuses_without_using_up_the_cap(self) -> None:
        counts = counted({LOOKUP: 1}, [failed(LOOKUP, "breaker_open"), result(OTHER)])
        assert counts == {LOOKUP: 1, OTHER: 1}


def round_of(*pairs: tuple[ToolCall, ToolMessage]) -> list[Any]:
    """An assistant message asking for the calls, then their results."""
    ai = AIMessage(content="", tool_calls=[c for c, _ in pairs])
    return [ai, *(r.model_copy(update={"tool_call_id": c["id"]}) for c, r in pairs)]


def books_after(state: AgentState, *rounds: list[Any]) -> AgentState:
    """The state after each round's results are booked in turn, as the graph applies them
    (a result the books rewrite replaces the round's original)."""
    out: dict[str, Any] = {"messages": [HumanMessage(content="hi")], **state}
    for new in rounds:
        seen = cast(AgentState, {**out, "messages": [*out["messages"], *new]})
        update = keep_books(seen, SETTINGS, WRITES)
        rewritten = {m.tool_call_id: m for m in update.pop("messages", [])}
        new = [rewritten.get(m.tool_call_id, m) if isinstance(m, ToolMessage) else m for m in new]
        out = {**out, **update, "messages": [*out["messages"], *new]}
    return cast(AgentState, out)


class TestKeepBooks:
    def test_a_round_updates_counts_and_breakers_together(self) -> None:
        state = books_after(
            AgentState(turn_number=2),
            round_of(
                (call(LOOKUP, "a", order_id="#W1"), failed(LOOKUP)),
                (call(OTHER, "b", product_id="9"), result(OTHER, content="Product 9")),
            ),
        )
        assert state["turn_tool_calls"] == {LOOKUP: 1, OTHER: 1}
        assert state["breakers"] == {LOOKUP: Breaker(failures=1, opened_turn=None), OTHER: CLOSED}

    def test_the_same_call_and_result_twice_gets_a_hint_and_three_times_ends_the_turn(
        self,
    ) -> None:
        same = (call(LOOKUP, "x", order_id="#W1"), result(LOOKUP, content="Order #W1: pending"))
        second = books_after(AgentState(turn_number=1), round_of(same), round_of(same))
        hinted = [m for m in second["messages"] if isinstance(m, ToolMessage)]
        assert [str(m.content).endswith(REPEAT_HINT) for m in hinted] == [False, True]
        assert second["force_answer"] is None
        third = books_after(second, round_of(same))
        assert third["force_answer"] == "repeat"

    def test_a_cached_copy_is_the_same_result_for_the_repeat_guard(self) -> None:
        ask = call(LOOKUP, "x", order_id="#W1")
        fresh = result(LOOKUP, Artifact(outcome="ok", cache="miss"), "Order #W1: pending")
        cached = result(
            LOOKUP, Artifact(outcome="ok", cache="hit"), str(fresh.content) + CACHED_NOTE
        )
        state = books_after(
            AgentState(turn_number=1), round_of((ask, fresh)), round_of((ask, cached))
        )
        last = [m for m in state["messages"] if isinstance(m, ToolMessage)][-1]
        assert str(last.content).endswith(REPEAT_HINT)

    def test_rounds_that_teach_nothing_new_end_the_turn(self) -> None:
        def asking(order: str) -> list[Any]:
            # different arguments, the same answer each time
            return round_of((call(LOOKUP, order, order_id=order), failed(LOOKUP)))

        state = books_after(AgentState(turn_number=1), asking("#W1"), asking("#W2"))
        assert (state["stale_rounds"], state["force_answer"]) == (1, None)
        state = books_after(state, asking("#W3"))
        assert state["stale_rounds"] == 2
        state = books_after(state, asking("#W4"))
        assert (state["stale_rounds"], state["force_answer"]) == (3, "stagnation")

    def test_a_new_result_resets_stagnation(self) -> None:
        lookup = (call(LOOKUP, "a", order_id="#W1"), result(LOOKUP, content="Order #W1"))
        state = books_after(AgentState(turn_number=1, stale_rounds=2), round_of(lookup))
        assert state["stale_rounds"] == 0


class TestCacheBooks:
    def test_a_miss_is_stored_and_a_hit_counted(self) -> None:
        ask = call(LOOKUP, "a", order_id="#W1")
        miss = result(
            LOOKUP, Artifact(outcome="ok", cache="miss", ids={"order": ["#W1"]}), "Order #W1"
        )
        state = books_after(AgentState(turn_number=3), round_of((ask, miss)))
        entry = state["tool_cache"][cache_key(LOOKUP, {"order_id": "#W1"})]
        assert (entry["content"], entry["turn"], entry["tags"]) == ("Order #W1", 3, ["order:#W1"])
        hit = result(LOOKUP, Artifact(outcome="ok", cache="hit"), "Order #W1" + CACHED_NOTE)
        state = books_after(state, round_of((ask, hit)))
        assert state["cache_stats"] == {"hits": 1, "misses": 1}

    def test_a_write_drops_what_it_touched_and_a_failed_write_drops_nothing(self) -> None:
        ask = call(LOOKUP, "a", order_id="#W1")
        miss = result(
            LOOKUP, Artifact(outcome="ok", cache="miss", ids={"order": ["#W1"]}), "Order #W1"
        )
        state = books_after(AgentState(turn_number=1), round_of((ask, miss)))
        cancel = call("cancel_pending_order", "w", order_id="#W1", reason="no longer needed")
        refused = Artifact(outcome="error", kind="refused", ids={"order": ["#W1"]})
        kept = books_after(state, round_of((cancel, result("cancel_pending_order", refused))))
        assert list(kept["tool_cache"]) == list(state["tool_cache"])
        done = Artifact(outcome="ok", ids={"order": ["#W1"]})
        dropped = books_after(state, round_of((cancel, result("cancel_pending_order", done))))
        assert dropped["tool_cache"] == {}
