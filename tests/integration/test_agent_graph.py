"""The agent graph end to end: real Postgres, real tools, the real ChatOpenAI client
against the scripted model server."""

from __future__ import annotations

import asyncio
import json
import time
from typing import Any

import pytest
from langchain_core.messages import AIMessage, HumanMessage, ToolMessage
from langchain_core.tools import StructuredTool
from psycopg_pool import AsyncConnectionPool

from app.agent.cache import REPEAT_HINT
from app.agent.nodes import BUDGET_SPENT
from app.agent.repair import INTERRUPTED
from app.agent.tool_exec import DECLINED, WriteNodes
from app.config import Settings
from app.db.checkpointer import PostgresCheckpointer
from app.tools import writing
from tests.fakellm import ChatRequest, Reply, Script, ScriptedModelServer, ToolCall
from tests.fakellm.policies import summarise_tool_results
from tests.integration.agent_harness import (
    Conversation,
    fetch_all,
    fetch_one,
    load_small_shop,
    make_graph,
)
from tests.integration.test_guest_identity import emailed_code

PENDING_ORDER = "#W2611340"  # noah_brown_6181, paid 32.00 by paypal_5727330
OTHER_CUSTOMERS_ORDER = "#W5490111"  # mia_garcia_4516


CANCEL = Reply.call("cancel_pending_order", order_id=PENDING_ORDER, reason="no longer needed")


def cancel_then_say(answer: str) -> Script:
    """The model cancels the pending order, then answers with `answer`."""
    return Script([CANCEL, Reply.say(answer)])


def tool_messages(values: dict[str, Any]) -> list[ToolMessage]:
    return [m for m in values["messages"] if isinstance(m, ToolMessage)]


def called(values: dict[str, Any]) -> list[tuple[str, dict[str, Any]]]:
    return [
        (c["name"], dict(c["args"]))
        for m in values["messages"]
        if isinstance(m, AIMessage)
        for c in m.tool_calls
    ]


def final_text(values: dict[str, Any]) -> str:
    last = values["messages"][-1]
    assert isinstance(last, AIMessage)
    return str(last.content)


@pytest.fixture
async def shop(db: AsyncConnectionPool[Any]) -> AsyncConnectionPool[Any]:
    await load_small_shop(db)
    return db


def settings_for(base: Settings, **changes: Any) -> Settings:
    return base.model_copy(update=changes)


@pytest.fixture
async def conversation(
    shop: AsyncConnectionPool[Any], model_server: ScriptedModelServer, settings: Settings
) -> Conversation:
    return Conversation(make_graph(shop, model_server, settings), settings)


def well_formed(request: ChatRequest) -> None:
    """Every tool call the model was sent is followed by its result (OpenAI's 400 otherwise)."""
    pending: set[str] = set()
    for m in request.messages:
        if m.get("role") == "assistant":
            assert not pending, f"calls without results: {pending}"
            pending = {c["id"] for c in m.get("tool_calls") or []}
        elif m.get("role") == "tool":
            pending.discard(m["tool_call_id"])
    assert not pending


class TestReadTurns:
    async def test_order_lookup_calls_get_order_details_then_answers(
        self, conversation: Conversation, model_server: ScriptedModelServer
    ) -> None:
        def answer(request: ChatRequest) -> Reply:
            result = request.pending_tool_results()[0].json()
            return Reply.say(f"Your order {result['order_id']} is {result['status']}.")

        model_server.use(Script([Reply.call("get_order_details", order_id=PENDING_ORDER), answer]))
        values = await conversation.say(f"where is my order {PENDING_ORDER}?")
        assert called(values) == [("get_order_details", {"order_id": PENDING_ORDER})]
        assert final_text(values) == f"Your order {PENDING_ORDER} is pending."
        assert values["turn_steps"] == 2
        assert len(model_server.requests) == 2

    async def test_a_turn_hops_to_no_worker_thread(
        self,
        conversation: Conversation,
        model_server: ScriptedModelServer,
        monkeypatch: pytest.MonkeyPatch,
    ) -> None:
        # LangGraph runs a plain function of an async graph (a node, a routing function)
        # in the loop's executor via langchain's `run_in_executor`: a thread hop each time.
        loop = asyncio.get_running_loop()
        hops: list[str] = []
        run_in_executor = loop.run_in_executor

        def counted(executor: Any, func: Any, *args: Any) -> Any:
            hops.append(getattr(func, "__qualname__", repr(func)))
            return run_in_executor(executor, func, *args)

        monkeypatch.setattr(loop, "run_in_executor", counted)
        model_server.use(
            Script([Reply.call("get_order_details", order_id=PENDING_ORDER), Reply.say("Ok.")])
        )
        await conversation.say("status?")
        assert len(model_server.requests) == 2  # agent, tools, agent: routed twice
        assert [h for h in hops if "run_in_executor" in h] == []

    async def test_shipping_estimate(
        self, conversation: Conversation, model_server: ScriptedModelServer
    ) -> None:
        model_server.use(
            Script(
                [Reply.call("calc_shipping", distance_km=300, weight_kg=2), summarise_tool_results]
            )
        )
        values = await conversation.say("shipping for 2 kg over 300 km?")
        assert called(values) == [("calc_shipping", {"distance_km": 300, "weight_kg": 2})]
        (result,) = tool_messages(values)
        assert "249" in str(result.content)  # 5 + 0.8 * 300 + 2 * 2 = 249.00
        assert values["turn_steps"] == 2

    async def test_parallel_reads_run_concurrently(
        self, shop: AsyncConnectionPool[Any], model_server: ScriptedModelServer, settings: Settings
    ) -> None:
        spans: dict[str, tuple[float, float]] = {}

        def probe(name: str) -> StructuredTool:
            async def run(ticket: str) -> str:
                start = time.monotonic()
                await asyncio.sleep(0.3)
                spans[name] = (start, time.monotonic())
                return f"{name} ok {ticket}"

            return StructuredTool.from_function(
                coroutine=run, name=name, description=f"Test probe {name}."
            )

        graph = make_graph(
            shop, model_server, settings, extra_read_tools=[probe("probe_a"), probe("probe_b")]
        )
        model_server.use(
            Script(
                [
                    Reply.calls(
                        ToolCall("probe_a", {"ticket": "1"}), ToolCall("probe_b", {"ticket": "2"})
                    ),
                    Reply.say("done"),
                ]
            )
        )
        await Conversation(graph, settings).say("check both")
        (a0, a1), (b0, b1) = spans["probe_a"], spans["probe_b"]
        assert a0 < b1 and b0 < a1, "the two reads did not overlap"


class TestWrites:
    async def test_two_writes_in_one_message_run_serially_in_order(
        self, shop: AsyncConnectionPool[Any], model_server: ScriptedModelServer, settings: Settings
    ) -> None:
        no_confirm = settings_for(settings, write_confirmation="off")
        conv = Conversation(make_graph(shop, model_server, no_confirm), no_confirm)
        address = {
            "order_id": PENDING_ORDER,
            "address1": "1 New St",
            "address2": "",
            "city": "Austin",
            "state": "TX",
            "country": "USA",
            "zip": "78701",
        }
        model_server.use(
            Script(
                [
                    Reply.calls(
                        ToolCall("modify_pending_order_address", address),
                        ToolCall(
                            "cancel_pending_order",
                            {"order_id": PENDING_ORDER, "reason": "ordered by mistake"},
                        ),
                    ),
                    Reply.say("Both done."),
                ]
            )
        )
        values = await conv.say("change the address, then cancel")
        results = tool_messages(values)
        assert [m.name for m in results] == ["modify_pending_order_address", "cancel_pending_order"]
        assert all(m.status != "error" for m in results)
        audit = await fetch_all(shop, "SELECT tool_name FROM audit_log ORDER BY id")
        assert [a["tool_name"] for a in audit] == [
            "modify_pending_order_address",
            "cancel_pending_order",
        ]
        order = await fetch_one(
            shop, "SELECT status, city FROM orders WHERE id = %s", PENDING_ORDER
        )
        assert order == {"status": "cancelled", "city": "Austin"}

    async def test_confirm_then_approve_executes_the_write(
        self, conversation: Conversation, model_server: ScriptedModelServer, shop: Any
    ) -> None:
        model_server.use(cancel_then_say("Cancelled."))
        await conversation.say("yes, cancel it")
        state = await conversation.state()
        assert state.next == ("confirm",)
        (pending,) = state.interrupts[0].value["pending"]
        assert pending["name"] == "cancel_pending_order"
        assert PENDING_ORDER in pending["summary"]
        before = await fetch_one(shop, "SELECT status FROM orders WHERE id = %s", PENDING_ORDER)
        assert before["status"] == "pending"

        values = await conversation.resume("approve")
        after = await fetch_one(shop, "SELECT status FROM orders WHERE id = %s", PENDING_ORDER)
        assert after["status"] == "cancelled"
        assert final_text(values) == "Cancelled."
        assert (await conversation.state()).next == ()

    async def test_confirm_then_reject_changes_nothing(
        self, conversation: Conversation, model_server: ScriptedModelServer, shop: Any
    ) -> None:
        model_server.use(cancel_then_say("Alright, nothing changed."))
        await conversation.say("cancel it")
        values = await conversation.resume("reject")
        (declined,) = tool_messages(values)
        assert declined.content == DECLINED
        order = await fetch_one(shop, "SELECT status FROM orders WHERE id = %s", PENDING_ORDER)
        assert order["status"] == "pending"
        assert await fetch_all(shop, "SELECT * FROM tool_executions") == []

    async def test_crash_after_commit_then_resume_executes_once(
        self,
        conversation: Conversation,
        model_server: ScriptedModelServer,
        shop: Any,
        monkeypatch: pytest.MonkeyPatch,
    ) -> None:
        class Crash(BaseException):
            """Stands in for the process dying: nothing in the graph catches it."""

        original = WriteNodes._run_one
        crashes = {"left": 1}

        async def crash_after_commit(self: WriteNodes, *args: Any) -> Any:
            result = await original(self, *args)
            if crashes["left"]:
                crashes["left"] -= 1
                raise Crash()
            return result

        monkeypatch.setattr(WriteNodes, "_run_one", crash_after_commit)
        model_server.use(cancel_then_say("Your order is cancelled."))
        await conversation.say("cancel please")
        with pytest.raises(Crash):
            await conversation.resume("approve")
        # the write committed, but the thread has no result for it yet
        assert (await conversation.state()).next == ("write_tools",)

        values = await conversation.resume()  # a restarted worker continues the run
        executions = await fetch_all(shop, "SELECT ok FROM tool_executions")
        refunds = await fetch_all(
            shop,
            "SELECT * FROM payment_transactions"
            " WHERE order_id = %s AND transaction_type = 'refund'",
            PENDING_ORDER,
        )
        assert executions == [{"ok": True}]
        assert len(refunds) == 1
        results = tool_messages(values)
        assert len(results) == 1 and results[0].status != "error"
        assert final_text(values) == "Your order is cancelled."

    async def test_the_call_is_stored_before_the_write_commits(
        self,
        shop: AsyncConnectionPool[Any],
        model_server: ScriptedModelServer,
        settings: Settings,
        monkeypatch: pytest.MonkeyPatch,
    ) -> None:
        """A run holds its checkpoints back until something needs them stored. Without a
        confirmation there is no interrupt to store them: the write itself must, or a crash
        after its commit would leave no call to resume at, and the turn would write again."""
        unconfirmed = settings_for(settings, write_confirmation="off")
        conversation = Conversation(make_graph(shop, model_server, unconfirmed), unconfirmed)
        stored_at_commit: list[Any] = []
        real_execute_write = writing.execute_write

        async def looking_first(pool: Any, *, action: Any, **kwargs: Any) -> Any:
            async def look_then_act(conn: Any) -> str:
                # a saver outside the run sees only what is in the database
                stored = await PostgresCheckpointer(shop).aget_tuple(conversation.config)
                stored_at_commit.append(stored)
                result: str = await action(conn)
                return result

            return await real_execute_write(pool, action=look_then_act, **kwargs)

        monkeypatch.setattr(writing, "execute_write", looking_first)
        model_server.use(cancel_then_say("Your order is cancelled."))
        values = await conversation.say("cancel my order please")

        assert final_text(values) == "Your order is cancelled."
        (stored,) = stored_at_commit
        assert stored is not None, "nothing of the turn was stored when the write ran"
        last = stored.checkpoint["channel_values"]["messages"][-1]
        assert isinstance(last, AIMessage)
        assert [c["name"] for c in last.tool_calls] == ["cancel_pending_order"]


class TestBreaker:
    async def test_breaker_opens_survives_restart_and_closes_after_cooldown(
        self, shop: AsyncConnectionPool[Any], model_server: ScriptedModelServer, settings: Settings
    ) -> None:
        missing = {"order_id": "#W0000000"}
        model_server.use(
            Script(
                [
                    Reply.call("get_order_details", **missing),
                    Reply.call("get_order_details", order_id="#W0000001"),
                    Reply.call("get_order_details", order_id="#W0000002"),
                    Reply.call("get_order_details", order_id=PENDING_ORDER),
                    Reply.say("Sorry, I cannot look that up right now."),
                ]
            )
        )
        conv = Conversation(make_graph(shop, model_server, settings), settings)
        values = await conv.say("where are my orders?")
        results = tool_messages(values)
        assert [str(r.content).startswith("Error:") for r in results] == [True] * 4
        assert "temporarily unavailable" in str(results[3].content)
        assert values["breakers"]["get_order_details"]["opened_turn"] == 1

        # a new process: a fresh graph and checkpointer over the same database
        restarted = Conversation(make_graph(shop, model_server, settings), settings)
        restarted.session_id = conv.session_id
        model_server.use(
            Script(
                [Reply.call("get_order_details", order_id=PENDING_ORDER), Reply.say("Still down.")]
            )
        )
        values = await restarted.say("try again")
        assert "temporarily unavailable" in str(tool_messages(values)[-1].content)

        # turn 3: the cool-down (2 turns) is over and the call goes through
        model_server.use(
            Script(
                [Reply.call("get_order_details", order_id=PENDING_ORDER), Reply.say("Found it.")]
            )
        )
        values = await restarted.say("and now?")
        last = tool_messages(values)[-1]
        assert json.loads(str(last.content))["order_id"] == PENDING_ORDER
        assert values["breakers"]["get_order_details"]["opened_turn"] is None

    async def test_step_budget_ends_with_a_graceful_answer(
        self, shop: AsyncConnectionPool[Any], model_server: ScriptedModelServer, settings: Settings
    ) -> None:
        tight = settings_for(settings, turn_step_budget=3)
        model_server.use(
            lambda r: Reply.call("calc_shipping", distance_km=len(r.messages), weight_kg=1)
        )
        conv = Conversation(make_graph(shop, model_server, tight), tight)
        values = await conv.say("loop forever")
        assert final_text(values) == BUDGET_SPENT
        assert len(model_server.requests) == 3

    async def test_repeat_guard_hints_then_ends_the_loop(
        self, conversation: Conversation, model_server: ScriptedModelServer
    ) -> None:
        same = Reply.call("get_order_details", order_id=PENDING_ORDER)
        model_server.use(Script([same, same, same, Reply.say("Here is what I found.")]))
        values = await conversation.say("status?")
        results = tool_messages(values)
        assert len(results) == 3
        assert not str(results[0].content).endswith(REPEAT_HINT)
        assert str(results[1].content).endswith(REPEAT_HINT)
        assert final_text(values) == "Here is what I found."
        # the last model call was sent without tools, so it could only answer
        assert not model_server.requests[-1].tools


class TestRobustness:
    async def test_dangling_tool_call_is_closed_before_the_next_turn(
        self, conversation: Conversation, model_server: ScriptedModelServer
    ) -> None:
        model_server.use(Script([Reply.say("Hello!")]))
        await conversation.say("hi")
        dangling = AIMessage(
            content="",
            id="dangling-ai",
            tool_calls=[{"name": "get_order_details", "args": {"order_id": "x"}, "id": "call_x"}],
        )
        await conversation.graph.aupdate_state(
            conversation.config, {"messages": [dangling]}, as_node="agent"
        )
        model_server.use(Script([Reply.say("How can I help?")]))
        values = await conversation.say("hello again")
        closing = next(m for m in tool_messages(values) if m.tool_call_id == "call_x")
        assert closing.content == INTERRUPTED
        order = [type(m).__name__ for m in values["messages"][-4:]]
        assert order == ["AIMessage", "ToolMessage", "HumanMessage", "AIMessage"]
        well_formed(model_server.requests[-1])

    async def test_invented_tool_and_malformed_arguments_get_error_observations(
        self, conversation: Conversation, model_server: ScriptedModelServer
    ) -> None:
        model_server.use(
            Script(
                [
                    Reply.call("refund_everything", order_id=PENDING_ORDER),
                    Reply.calls(ToolCall("get_order_details", '{"order_id": W2611340}')),
                    Reply.say("Let me try differently."),
                ]
            )
        )
        values = await conversation.say("refund me")
        invented, malformed = tool_messages(values)
        assert str(invented.content).startswith("Error: there is no tool named 'refund_everything'")
        assert str(malformed.content).startswith("Error: the arguments for get_order_details")
        assert final_text(values) == "Let me try differently."
        for request in model_server.requests:
            well_formed(request)


class TestGuestIdentity:
    async def test_guest_is_blocked_until_the_code_then_bound_to_one_customer(
        self, shop: AsyncConnectionPool[Any], model_server: ScriptedModelServer, settings: Settings
    ) -> None:
        """Under the old rules the email lookup alone verified the guest; now it sends a code
        and the guest is served only once the code is confirmed."""
        conv = Conversation(make_graph(shop, model_server, settings), settings)
        conv.user_id, conv.role = "guest-1", "guest"
        model_server.use(
            Script(
                [
                    Reply.call("get_order_details", order_id=PENDING_ORDER),
                    Reply.call("find_user_id_by_email", email="noah.brown7922@example.com"),
                    Reply.call("get_order_details", order_id=PENDING_ORDER),
                    Reply.say("Please type the code we emailed you."),
                ]
            )
        )
        values = await conv.say("what about my order?")
        before, lookup, still_before = tool_messages(values)
        assert str(before.content).startswith("Error:")
        assert "pending" not in str(before.content)  # reveals nothing about the order
        assert str(lookup.content).startswith("Verification started:")
        assert str(still_before.content).startswith("Error:")
        assert values.get("verified_user_id") is None

        code = await emailed_code(shop, "noah.brown7922@example.com")
        model_server.use(
            Script(
                [
                    Reply.call("confirm_identity", code=code),
                    Reply.call("get_order_details", order_id=PENDING_ORDER),
                    Reply.call("find_user_id_by_email", email="mia.garcia2723@example.com"),
                    Reply.call("get_order_details", order_id=OTHER_CUSTOMERS_ORDER),
                    Reply.say("Done."),
                ]
            )
        )
        values = await conv.say(code)
        verify, after, switch, other = tool_messages(values)[-4:]
        assert verify.content == "noah_brown_6181"
        assert json.loads(str(after.content))["status"] == "pending"
        assert str(switch.content).startswith("Error:")
        assert str(other.content).startswith("Error:")
        assert values["verified_user_id"] == "noah_brown_6181"
        # the system prompt names the verified customer once verified
        assert "noah_brown_6181" in model_server.requests[-1].system_prompt


class TestTurnState:
    async def test_human_message_id_opens_the_turn(
        self, conversation: Conversation, model_server: ScriptedModelServer
    ) -> None:
        model_server.use(Script([Reply.say("Hi there")]))
        values = await conversation.say("hi")
        human = next(m for m in values["messages"] if isinstance(m, HumanMessage))
        assert values["turn_id"] == human.id
        assert values["turn_number"] == 1

    async def test_a_short_thread_skips_the_summarise_step(
        self, conversation: Conversation, model_server: ScriptedModelServer
    ) -> None:
        model_server.use(Script([Reply.say("Hi there")]))
        await conversation.say("hi")
        steps = [s.next async for s in conversation.graph.aget_state_history(conversation.config)]
        assert ("agent",) in steps
        assert ("summarize",) not in steps


class TestToolCache:
    async def test_repeated_lookup_is_served_from_the_cache_until_a_write(
        self, shop: AsyncConnectionPool[Any], model_server: ScriptedModelServer, settings: Settings
    ) -> None:
        no_confirm = settings_for(settings, write_confirmation="off")
        conv = Conversation(make_graph(shop, model_server, no_confirm), no_confirm)
        lookup = Reply.call("get_order_details", order_id=PENDING_ORDER)
        model_server.use(Script([lookup, Reply.say("pending")]))
        first = await conv.say("status?")
        assert first["cache_stats"] == {"hits": 0, "misses": 1}

        model_server.use(Script([lookup, Reply.say("still pending")]))
        second = await conv.say("status again?")
        cached = tool_messages(second)[-1]
        assert cached.artifact["cache"] == "hit"
        assert json.loads(str(cached.content).split("\n(cached")[0])["status"] == "pending"
        assert second["cache_stats"] == {"hits": 1, "misses": 0}

        model_server.use(Script([CANCEL, lookup, Reply.say("cancelled")]))
        third = await conv.say("cancel it and show me")
        fresh = tool_messages(third)[-1]
        assert fresh.artifact["cache"] == "miss"
        assert json.loads(str(fresh.content))["status"] == "cancelled"


class TestReflection:
    async def test_reflection_note_arrives_every_fifth_call(
        self, shop: AsyncConnectionPool[Any], model_server: ScriptedModelServer, settings: Settings
    ) -> None:
        calls = [Reply.call("calc_shipping", distance_km=i, weight_kg=1) for i in range(11)]
        model_server.use(Script([*calls, Reply.say("done")]))
        conv = Conversation(make_graph(shop, model_server, settings), settings)
        await conv.say("estimate a lot")
        with_note = [
            i + 1
            for i, r in enumerate(model_server.requests)
            if any(
                m.get("role") == "system" and "calls this turn" in str(m.get("content"))
                for m in r.messages
            )
        ]
        assert with_note == [6, 11]
        note = next(
            m["content"]
            for m in model_server.requests[5].messages
            if "calls this turn" in str(m.get("content"))
        )
        assert note.startswith("You have made 5 calls this turn.")


class TestCitations:
    async def test_articles_read_become_citations_of_the_turn(
        self, conversation: Conversation, model_server: ScriptedModelServer, shop: Any
    ) -> None:
        from app.help.repository import sync_help_articles

        await sync_help_articles(shop)

        def read_first_hit(request: ChatRequest) -> Reply:
            hits = request.pending_tool_results()[0].json()["results"]
            return Reply.call("get_help_article", article_id=hits[0]["id"])

        model_server.use(
            Script(
                [
                    Reply.call("search_help_center", query="how long do refunds take"),
                    read_first_hit,
                    Reply.say("Refunds to a card take a few business days."),
                ]
            )
        )
        values = await conversation.say("how long do refunds take?")
        (citation,) = values["citations"]
        assert citation["id"] == "refund-timing"
        assert citation["turn"] == 1 and citation["title"] and citation["snippet"]

    async def test_stagnation_ends_the_turn(
        self, conversation: Conversation, model_server: ScriptedModelServer, shop: Any
    ) -> None:
        # different arguments, the same answer: rounds 2-4 add nothing new, so the model is
        # told to answer and gets no tools for its next call
        rounds = [Reply.call("calculate", expression=e) for e in ("1+1", "2*1", "4/2", "3-1")]
        model_server.use(Script([*rounds, Reply.say("Here you go.")]))
        values = await conversation.say("estimate")
        assert values["force_answer"] == "stagnation"
        assert values["stale_rounds"] == 3
        assert not model_server.requests[-1].tools
        assert final_text(values) == "Here you go."
        assert len(model_server.requests) == 5


class TestPreferences:
    async def test_preferences_are_read_once_per_turn_and_reach_every_call(
        self,
        conversation: Conversation,
        model_server: ScriptedModelServer,
        shop: AsyncConnectionPool[Any],
        monkeypatch: pytest.MonkeyPatch,
    ) -> None:
        from langgraph.store.postgres.aio import AsyncPostgresStore

        import app.agent.nodes as nodes
        from app.memory.store import forget, remember

        await remember(
            AsyncPostgresStore(shop),
            conversation.user_id,
            "name",
            "Sam",
            thread_id=conversation.thread_id,
            verified_by="token",
        )
        reads: list[str] = []
        real = nodes.list_preferences

        async def counted(store: Any, customer: str) -> Any:
            reads.append(customer)
            return await real(store, customer)

        monkeypatch.setattr(nodes, "list_preferences", counted)
        model_server.use(
            Script([Reply.call("get_order_details", order_id=PENDING_ORDER), Reply.say("ok")])
        )
        await conversation.say("status?")
        assert reads == [conversation.user_id]
        assert all('name: "Sam"' in r.system_prompt for r in model_server.requests)
        model_server.use(Script([Reply.say("hi again")]))
        await conversation.say("hello")
        assert len(reads) == 2  # a new turn reads again
        await forget(AsyncPostgresStore(shop), conversation.user_id, "name")
