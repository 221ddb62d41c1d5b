from __future__ import annotations

import json
from typing import Any

import pytest
from langchain_core.messages import AIMessage, HumanMessage, ToolMessage
from langchain_core.tools import BaseTool
from langgraph.graph import END, START, StateGraph
from langgraph.prebuilt import ToolNode
from langgraph.types import Command
from psycopg_pool import AsyncConnectionPool

from app.agent.state import AgentState
from app.identity import AgentContext
from app.tools.registry import build_tools
from app.tools.scope import NOT_VERIFIED
from tests import factories as f
from tests.integration.test_guest_identity import emailed_code

SARA, BOB = "sara_doe_496", "bob_lee_1"
MISSING_ORDER = "Error: order #W0000009 was not found for this customer."


@pytest.fixture
async def tools(db: AsyncConnectionPool[Any]) -> dict[str, BaseTool]:
    bob = f.customer(
        BOB,
        first_name="Bob",
        last_name="Lee",
        email="Bob@Example.com",
        payment_methods=(f.credit_card("credit_card_bob", "0001"),),
    )
    await f.seed(
        db,
        customers=(f.customer(order_ids=()), bob),
        products=(f.bottle(), f.lamp()),
        orders=(f.order("#W0000001"), f.order("#W0000009", customer_id=BOB)),
    )
    return {t.name: t for t in build_tools(db).all}


async def run(tool: BaseTool, runtime: Any, **args: Any) -> Any:
    return await f.invoke(tool, args, runtime)


class TestGuestVerification:
    """Under the old rules an email lookup verified a guest; now it only sends a code (the
    code flow itself: tests/integration/test_guest_identity.py)."""

    async def test_email_lookup_by_a_guest_sends_a_code_and_verifies_nothing(
        self, db: AsyncConnectionPool[Any], tools: dict[str, BaseTool]
    ) -> None:
        result = await run(
            tools["find_user_id_by_email"], f.tool_runtime(), email="BOB@example.com"
        )
        assert not isinstance(result, Command)  # no verified_user_id written
        assert f.text_of(result).startswith("Verification started:")
        assert BOB not in f.text_of(result)
        assert len(await emailed_code(db, "Bob@Example.com")) == 6

    async def test_email_lookup_then_code_verifies_and_returns_the_user_id(
        self, db: AsyncConnectionPool[Any], tools: dict[str, BaseTool]
    ) -> None:
        await run(tools["find_user_id_by_email"], f.tool_runtime(), email="BOB@example.com")
        code = await emailed_code(db, "Bob@Example.com")
        result = await run(tools["confirm_identity"], f.tool_runtime(), code=code)
        assert isinstance(result, Command)
        assert result.update["verified_user_id"] == BOB  # type: ignore[index]
        [message] = result.update["messages"]  # type: ignore[index]
        assert isinstance(message, ToolMessage)
        assert (message.content, message.tool_call_id, message.name) == (
            BOB,
            "call_1",
            "confirm_identity",
        )

    async def test_name_zip_lookup_is_case_insensitive(
        self, db: AsyncConnectionPool[Any], tools: dict[str, BaseTool]
    ) -> None:
        await run(
            tools["find_user_id_by_name_zip"],
            f.tool_runtime(),
            first_name="sara",
            last_name="DOE",
            zip="78701",
        )
        code = await emailed_code(db, "sara.doe@example.com")
        result = await run(tools["confirm_identity"], f.tool_runtime(), code=code)
        assert f.text_of(result) == SARA

    async def test_unknown_email_reads_like_a_known_one(self, tools: dict[str, BaseTool]) -> None:
        known = await run(tools["find_user_id_by_email"], f.tool_runtime(), email="bob@example.com")
        unknown = await run(tools["find_user_id_by_email"], f.tool_runtime(), email="x@y.z")
        assert f.text_of(unknown) == f.text_of(known)

    async def test_ambiguous_name_zip_reads_like_a_match_and_sends_nothing(
        self, db: AsyncConnectionPool[Any], tools: dict[str, BaseTool]
    ) -> None:
        twin = f.customer("sara_doe_2", email="other@example.com", payment_methods=())
        await f.seed(db, customers=(twin,))
        result = await run(
            tools["find_user_id_by_name_zip"],
            f.tool_runtime(),
            first_name="Sara",
            last_name="Doe",
            zip="78701",
        )
        assert f.text_of(result).startswith("Verification started:")
        assert await f.rows(db, "SELECT * FROM outbox") == []

    async def test_verified_guest_cannot_switch_to_another_customer(
        self, tools: dict[str, BaseTool]
    ) -> None:
        runtime = f.tool_runtime(verified=SARA)
        other = await run(tools["find_user_id_by_email"], runtime, email="bob@example.com")
        nobody = await run(tools["find_user_id_by_email"], runtime, email="nobody@example.com")
        assert f.text_of(other).startswith("Error: this conversation is already verified")
        assert f.text_of(other) == f.text_of(nobody)  # existence is not revealed
        same = await run(tools["find_user_id_by_email"], runtime, email="sara.doe@example.com")
        assert f.text_of(same) == SARA

    async def test_signed_in_customer_can_only_resolve_to_themselves(
        self, tools: dict[str, BaseTool]
    ) -> None:
        runtime = f.tool_runtime(user_id=SARA, role="customer")
        own = await run(tools["find_user_id_by_email"], runtime, email="sara.doe@example.com")
        other = await run(tools["find_user_id_by_email"], runtime, email="bob@example.com")
        assert f.text_of(own) == SARA
        assert f.text_of(other).startswith("Error:")


class TestScopeBeforeVerification:
    @pytest.mark.parametrize(
        ("name", "args"),
        [
            ("get_user_details", {"user_id": SARA}),
            ("get_order_details", {"order_id": "#W0000001"}),
            ("cancel_pending_order", {"order_id": "#W0000001", "reason": "no longer needed"}),
            ("modify_pending_order_payment", {"order_id": "#W0000001", "payment_method_id": "x"}),
            (
                "modify_user_address",
                {
                    "user_id": SARA,
                    "address1": "1 A St",
                    "address2": "",
                    "city": "Austin",
                    "state": "TX",
                    "country": "USA",
                    "zip": "78701",
                },
            ),
        ],
    )
    async def test_scoped_tools_refuse_and_record_nothing(
        self, db: AsyncConnectionPool[Any], tools: dict[str, BaseTool], name: str, args: Any
    ) -> None:
        before = await f.snapshot(db)
        result = await run(tools[name], f.tool_runtime(), **args)
        assert f.text_of(result) == NOT_VERIFIED
        assert SARA not in NOT_VERIFIED
        assert await f.snapshot(db) == before
        assert await f.rows(db, "SELECT * FROM tool_executions") == []

    async def test_catalog_and_arithmetic_need_no_identity(
        self, tools: dict[str, BaseTool]
    ) -> None:
        rt = f.tool_runtime()
        types = await run(tools["list_all_product_types"], rt)
        assert json.loads(f.text_of(types)) == {
            "Desk Lamp": "6817146515",
            "Water Bottle": "8310926033",
        }
        assert f.text_of(await run(tools["calculate"], rt, expression="2 + 2")) == "4.0"


class TestOtherCustomersDataLooksMissing:
    async def test_foreign_order_reads_like_a_missing_one(self, tools: dict[str, BaseTool]) -> None:
        rt = f.tool_runtime(verified=SARA)
        foreign = await run(tools["get_order_details"], rt, order_id="#W0000009")
        missing = await run(tools["get_order_details"], rt, order_id="#W0000077")
        assert f.text_of(foreign) == MISSING_ORDER
        assert f.text_of(missing) == MISSING_ORDER.replace("#W0000009", "#W0000077")

    async def test_foreign_order_write_looks_missing_and_changes_nothing(
        self, db: AsyncConnectionPool[Any], tools: dict[str, BaseTool]
    ) -> None:
        before = await f.snapshot(db)
        rt = f.tool_runtime(user_id=SARA, role="customer")
        result = await run(
            tools["cancel_pending_order"], rt, order_id="#W0000009", reason="no longer needed"
        )
        assert f.text_of(result) == MISSING_ORDER
        assert await f.snapshot(db) == before

    async def test_foreign_user_reads_like_a_missing_one(self, tools: dict[str, BaseTool]) -> None:
        rt = f.tool_runtime(verified=SARA)
        foreign = await run(tools["get_user_details"], rt, user_id=BOB)
        missing = await run(tools["get_user_details"], rt, user_id="nobody_1")
        assert f.text_of(foreign) == f"Error: user {BOB} was not found."
        assert f.text_of(missing) == "Error: user nobody_1 was not found."


class TestUserDetailsAndAddress:
    async def test_user_details_in_tau_bench_shape(self, tools: dict[str, BaseTool]) -> None:
        rt = f.tool_runtime(user_id=SARA, role="customer")
        user = json.loads(f.text_of(await run(tools["get_user_details"], rt, user_id=SARA)))
        assert user["name"] == {"first_name": "Sara", "last_name": "Doe"}
        assert user["orders"] == ["#W0000001"]
        assert user["payment_methods"]["gift_card_2222222"] == {
            "source": "gift_card",
            "balance": 100.0,
            "id": "gift_card_2222222",
        }
        assert user["payment_methods"]["credit_card_1111111"] == {
            "source": "credit_card",
            "brand": "visa",
            "last_four": "9212",
            "id": "credit_card_1111111",
        }

    async def test_modify_user_address_updates_the_profile(
        self, db: AsyncConnectionPool[Any], tools: dict[str, BaseTool]
    ) -> None:
        new = {"address1": "9 Oak Ave", "address2": "", "city": "Boston", "state": "MA"}
        new |= {"country": "USA", "zip": "02110"}
        rt = f.tool_runtime(verified=SARA)
        user = json.loads(
            f.text_of(await run(tools["modify_user_address"], rt, user_id=SARA, **new))
        )
        assert user["address"] == new
        [row] = await f.rows(db, "SELECT * FROM customers WHERE id = %s", SARA)
        assert {k: row[k] for k in new} == new
        [order] = await f.rows(db, "SELECT city FROM orders WHERE id = '#W0000001'")
        assert order["city"] == "Austin"

    async def test_modify_another_users_address_looks_missing(
        self, db: AsyncConnectionPool[Any], tools: dict[str, BaseTool]
    ) -> None:
        new = {"address1": "9 Oak Ave", "address2": "", "city": "Boston", "state": "MA"}
        new |= {"country": "USA", "zip": "02110"}
        before = await f.snapshot(db)
        rt = f.tool_runtime(verified=SARA)
        result = await run(tools["modify_user_address"], rt, user_id=BOB, **new)
        assert f.text_of(result) == f"Error: user {BOB} was not found."
        assert await f.snapshot(db) == before


class TestThroughAToolNodeGraph:
    async def test_guest_is_verified_by_code_then_served_only_their_orders(
        self, db: AsyncConnectionPool[Any], tools: dict[str, BaseTool]
    ) -> None:
        graph = StateGraph(AgentState, context_schema=AgentContext)
        graph.add_node("tools", ToolNode(list(tools.values())))
        graph.add_edge(START, "tools")
        graph.add_edge("tools", END)
        app = graph.compile()
        context = AgentContext(user_id="guest_1", role="guest", thread_id="guest_1:s1")

        def ask(*calls: tuple[str, dict[str, Any]]) -> AIMessage:
            return AIMessage(
                content="",
                tool_calls=[
                    {"name": n, "args": a, "id": f"c{i}", "type": "tool_call"}
                    for i, (n, a) in enumerate(calls)
                ],
            )

        lookup = ask(("find_user_id_by_email", {"email": "sara.doe@example.com"}))
        start: AgentState = {"messages": [HumanMessage("hi", id="h1"), lookup]}
        state = await app.ainvoke(start, context=context)
        assert state.get("verified_user_id") is None  # knowing the email proves nothing
        confirm = ask(
            ("confirm_identity", {"code": await emailed_code(db, "sara.doe@example.com")})
        )
        state = await app.ainvoke({"messages": [*state["messages"], confirm]}, context=context)
        assert state["verified_user_id"] == SARA
        assert state["messages"][-1].content == SARA

        reads = ask(
            ("get_order_details", {"order_id": "#W0000001"}),
            ("get_order_details", {"order_id": "#W0000009"}),
            ("find_user_id_by_email", {"email": "bob@example.com"}),
        )
        following: AgentState = {
            "messages": [*state["messages"], reads],
            "verified_user_id": state["verified_user_id"],
        }
        state = await app.ainvoke(following, context=context)
        own, foreign, switch = state["messages"][-3:]
        assert json.loads(own.content)["order_id"] == "#W0000001"
        assert foreign.content == MISSING_ORDER
        assert switch.content.startswith("Error: this conversation is already verified")
        assert state["verified_user_id"] == SARA
