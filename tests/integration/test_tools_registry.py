from __future__ import annotations

from typing import Any

import pytest
from langchain_core.utils.function_calling import convert_to_openai_tool
from psycopg_pool import AsyncConnectionPool

from app.db.idempotency import idempotency_key
from app.tools.registry import WRITE_TOOL_NAMES, PostgresWriteLedger, build_tools, summarize_write
from app.tools.results import TOOL_FAILED
from tests import factories as f

SARA = "sara_doe_496"
TAU_BENCH_ARGS = {
    "find_user_id_by_email": ["email"],
    "find_user_id_by_name_zip": ["first_name", "last_name", "zip"],
    "get_user_details": ["user_id"],
    "get_order_details": ["order_id"],
    "get_product_details": ["product_id"],
    "list_all_product_types": [],
    "calc_shipping": ["distance_km", "weight_kg"],
    "calculate": ["expression"],
    "cancel_pending_order": ["order_id", "reason"],
    "modify_pending_order_address": [
        "order_id", "address1", "address2", "city", "state", "country", "zip",
    ],
    "modify_pending_order_items": ["order_id", "item_ids", "new_item_ids", "payment_method_id"],
    "modify_pending_order_payment": ["order_id", "payment_method_id"],
    "modify_user_address": ["user_id", "address1", "address2", "city", "state", "country", "zip"],
    "return_delivered_order_items": ["order_id", "item_ids", "payment_method_id"],
    "exchange_delivered_order_items": [
        "order_id", "item_ids", "new_item_ids", "payment_method_id",
    ],
    "transfer_to_human_agents": ["summary"],
}  # fmt: skip
NEW_ADDRESS = {
    "address1": "123 Main St",
    "address2": "",
    "city": "Austin",
    "state": "TX",
    "country": "USA",
    "zip": "78701",
}


def closed_pool() -> AsyncConnectionPool[Any]:
    return AsyncConnectionPool("postgresql://nowhere.invalid/x", open=False)


class TestToolSet:
    def test_names_and_model_facing_arguments_match_tau_bench(self) -> None:
        tools = build_tools(closed_pool())
        assert {t.name for t in tools.write} == WRITE_TOOL_NAMES
        assert tools.all == [*tools.read, *tools.write]
        schemas = {t.name: convert_to_openai_tool(t)["function"] for t in tools.all}
        retail = {n: list(schemas[n]["parameters"]["properties"]) for n in TAU_BENCH_ARGS}
        assert retail == TAU_BENCH_ARGS
        for name in TAU_BENCH_ARGS:
            assert "runtime" not in str(schemas[name]["parameters"])
            assert len(schemas[name]["description"]) > 40

    def test_reads_and_writes_are_disjoint_and_unique(self) -> None:
        tools = build_tools(closed_pool())
        assert not {t.name for t in tools.read} & WRITE_TOOL_NAMES
        names = [t.name for t in tools.all]
        assert len(names) == len(set(names))


class TestToolsNeverRaise:
    async def test_read_tool_with_unreachable_database_returns_generic_error(self) -> None:
        tools = {t.name: t for t in build_tools(closed_pool()).all}
        rt = f.tool_runtime(user_id=SARA, role="customer")
        result = await f.invoke(tools["get_order_details"], {"order_id": "#W1"}, rt)
        assert f.text_of(result) == TOOL_FAILED
        assert result.status == "error"
        assert result.artifact["outcome"] == "error" and result.artifact["kind"] == "failed"

    async def test_write_tool_with_unreachable_database_returns_generic_error(self) -> None:
        tools = {t.name: t for t in build_tools(closed_pool()).all}
        rt = f.tool_runtime(user_id=SARA, role="customer")
        args = {"order_id": "#W1", "reason": "no longer needed"}
        result = await f.invoke(tools["cancel_pending_order"], args, rt)
        assert f.text_of(result) == TOOL_FAILED

    async def test_missing_arguments_are_an_error_observation(self) -> None:
        tools = {t.name: t for t in build_tools(closed_pool()).all}
        result = await f.invoke(
            tools["modify_pending_order_items"], {"order_id": "#W1"}, f.tool_runtime()
        )
        assert f.text_of(result).startswith("Error: invalid arguments (item_ids: Field required")
        assert result.status == "error"
        assert result.artifact == {"outcome": "error", "kind": "invalid_arguments"}


@pytest.fixture
async def shop(db: AsyncConnectionPool[Any]) -> AsyncConnectionPool[Any]:
    await f.seed(
        db,
        customers=(
            f.customer(),
            f.customer("bob_lee_1", email="bob@example.com", payment_methods=()),
        ),
        products=(f.bottle(), f.lamp()),
        orders=(
            f.order("#W0000001"),
            f.order("#W0000002", paid_with="gift_card_2222222"),
            f.order("#W0000003", status="delivered"),
            f.order("#W0000009", customer_id="bob_lee_1", paid_with="paypal_x"),
        ),
    )
    return db


class TestSummarizeWrite:
    @pytest.mark.parametrize(
        ("name", "args", "line"),
        [
            (
                "cancel_pending_order",
                {"order_id": "#W0000001", "reason": "no longer needed"},
                "Cancel order #W0000001 (3 items, refund 140.00 to credit card ending 9212)",
            ),
            (
                "modify_pending_order_address",
                {"order_id": "#W0000001", **NEW_ADDRESS},
                "Change the address of order #W0000001 to 123 Main St, Austin, TX 78701, USA",
            ),
            (
                "modify_user_address",
                {"user_id": SARA, **NEW_ADDRESS, "address2": "Apt 4"},
                f"Change the default address of user {SARA} to 123 Main St, Apt 4, Austin, "
                "TX 78701, USA",
            ),
            (
                "modify_pending_order_items",
                {
                    "order_id": "#W0000001",
                    "item_ids": ["1000"],
                    "new_item_ids": ["2000"],
                    "payment_method_id": "gift_card_2222222",
                },
                "Change 1 item in order #W0000001 (Water Bottle; charge 10.00 to gift card "
                "ending 2222)",
            ),
            (
                "modify_pending_order_payment",
                {"order_id": "#W0000002", "payment_method_id": "paypal_3333333"},
                "Pay for order #W0000002 (140.00) with PayPal instead of gift card ending 2222",
            ),
            (
                "return_delivered_order_items",
                {
                    "order_id": "#W0000003",
                    "item_ids": ["1000", "5000"],
                    "payment_method_id": "credit_card_1111111",
                },
                "Return 2 items from order #W0000003 (Water Bottle, Desk Lamp; refund 80.00 to "
                "credit card ending 9212)",
            ),
            (
                "exchange_delivered_order_items",
                {
                    "order_id": "#W0000003",
                    "item_ids": ["1000"],
                    "new_item_ids": ["3000"],
                    "payment_method_id": "paypal_3333333",
                },
                "Exchange 1 item in order #W0000003 (Water Bottle; refund 4.50 to PayPal)",
            ),
            (
                "transfer_to_human_agents",
                {"summary": "Customer wants\na human"},
                "Transfer the conversation to a human agent: Customer wants a human",
            ),
        ],
    )
    async def test_detailed_lines(
        self, shop: AsyncConnectionPool[Any], name: str, args: dict[str, Any], line: str
    ) -> None:
        assert await summarize_write(shop, SARA, name, args) == line

    async def test_thousands_are_grouped(self, shop: AsyncConnectionPool[Any]) -> None:
        async with shop.connection() as conn:
            await conn.execute("UPDATE payment_transactions SET amount = 1463.70")
        line = await summarize_write(
            shop,
            SARA,
            "cancel_pending_order",
            {"order_id": "#W0000001", "reason": "no longer needed"},
        )
        assert "refund 1,463.70 to credit card ending 9212" in line

    @pytest.mark.parametrize(
        ("customer", "name", "args", "line"),
        [
            (SARA, "cancel_pending_order", {"order_id": "#W0000009", "reason": "no longer needed"},
             "Cancel order #W0000009"),
            (SARA, "cancel_pending_order", {"order_id": "#W0000003", "reason": "no longer needed"},
             "Cancel order #W0000003"),
            (None, "modify_pending_order_payment", {"order_id": "#W0000001"},
             "Change the payment method of order #W0000001"),
            (SARA, "modify_user_address", {"user_id": "bob_lee_1"},
             "Change the default address of user bob_lee_1"),
            (SARA, "return_delivered_order_items", {"order_id": "#W0000003", "item_ids": 5},
             "Return items from order #W0000003"),
            (SARA, "no_such_tool", {}, "Run no_such_tool"),
        ],
    )  # fmt: skip
    async def test_generic_line_when_details_cannot_or_must_not_be_shown(
        self,
        shop: AsyncConnectionPool[Any],
        customer: str | None,
        name: str,
        args: dict[str, Any],
        line: str,
    ) -> None:
        assert await summarize_write(shop, customer, name, args) == line

    async def test_unreachable_database_gives_generic_line(self) -> None:
        line = await summarize_write(
            closed_pool(), SARA, "cancel_pending_order", {"order_id": "#W1", "reason": "x"}
        )
        assert line == "Cancel order #W1"


class TestPostgresWriteLedger:
    async def test_ledger_delegates_to_summary_and_recorded_result(
        self, shop: AsyncConnectionPool[Any]
    ) -> None:
        ledger = PostgresWriteLedger(shop)
        missing = await ledger.recorded_result(
            "nope",
            name="cancel_pending_order",
            args={},
            customer_id=SARA,
            observation_format="text",
        )
        assert missing is None
        line = await ledger.summarize(
            SARA, "modify_pending_order_address", {"order_id": "#W0000001", **NEW_ADDRESS}
        )
        assert line.startswith("Change the address of order #W0000001")

    async def test_a_recorded_write_reads_as_it_did_when_it_ran(
        self, shop: AsyncConnectionPool[Any]
    ) -> None:
        tools = {t.name: t.bound("text") for t in build_tools(shop).all}  # type: ignore[attr-defined]
        rt = f.tool_runtime(user_id=SARA, role="customer")
        args = {"order_id": "#W0000001", "reason": "no longer needed"}
        ran = await f.invoke(tools["cancel_pending_order"], args, rt)
        assert ran.artifact["ids"]["order"] == ["#W0000001"]
        assert SARA in ran.artifact["ids"]["customer"]
        key = idempotency_key(f"{SARA}:s1", "turn_1", "cancel_pending_order", args)
        recorded = await PostgresWriteLedger(shop).recorded_result(
            key,
            name="cancel_pending_order",
            args=args,
            customer_id=SARA,
            observation_format="text",
        )
        assert recorded == (ran.content, ran.artifact)
