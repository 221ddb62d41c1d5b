from __future__ import annotations

import json
from decimal import Decimal
from typing import Any

import pytest
from langchain_core.tools import BaseTool
from psycopg_pool import AsyncConnectionPool

from app.domain.models import Transaction
from app.tools.registry import build_tools
from tests import factories as f

SARA = "sara_doe_496"
CARD, GIFT, PAYPAL = "credit_card_1111111", "gift_card_2222222", "paypal_3333333"


@pytest.fixture
async def tools(db: AsyncConnectionPool[Any]) -> dict[str, BaseTool]:
    bob = f.customer(
        "bob_lee_1",
        first_name="Bob",
        last_name="Lee",
        email="bob@example.com",
        payment_methods=(f.credit_card("credit_card_bob", "0001"),),
    )
    await f.seed(
        db,
        customers=(f.customer(), bob),
        products=(f.bottle(unavailable=("4000",)), f.lamp()),
        orders=(
            f.order("#W0000001"),
            f.order("#W0000002", paid_with=GIFT),
            f.order("#W0000003", status="delivered"),
            f.order("#W0000009", customer_id="bob_lee_1", paid_with="credit_card_bob"),
        ),
    )
    return {t.name: t for t in build_tools(db).all}


async def call(tool: BaseTool, call_id: str = "call_1", **args: Any) -> str:
    runtime = f.tool_runtime(user_id=SARA, role="customer", call_id=call_id)
    return f.text_of(await f.invoke(tool, args, runtime))


def parsed(text: str) -> dict[str, Any]:
    value = json.loads(text, parse_float=Decimal)
    assert isinstance(value, dict)
    return value


async def balance(pool: AsyncConnectionPool[Any], method_id: str = GIFT) -> Decimal:
    [row] = await f.rows(pool, "SELECT balance FROM payment_methods WHERE id = %s", method_id)
    return Decimal(row["balance"])


async def payments(pool: AsyncConnectionPool[Any], order_id: str) -> list[Transaction]:
    found = await f.rows(
        pool,
        "SELECT transaction_type, amount, payment_method_id FROM payment_transactions"
        " WHERE order_id = %s ORDER BY position",
        order_id,
    )
    return [Transaction(r["transaction_type"], r["amount"], r["payment_method_id"]) for r in found]


async def order_row(pool: AsyncConnectionPool[Any], order_id: str) -> dict[str, Any]:
    [row] = await f.rows(pool, "SELECT * FROM orders WHERE id = %s", order_id)
    return row


class TestGetOrderDetails:
    async def test_returns_the_tau_bench_order_object(self, tools: dict[str, BaseTool]) -> None:
        order = parsed(await call(tools["get_order_details"], order_id="#W0000003"))
        assert list(order) == [
            "order_id",
            "user_id",
            "address",
            "items",
            "fulfillments",
            "status",
            "payment_history",
        ]
        assert order["status"] == "delivered"
        assert order["items"][0] == {
            "name": "Water Bottle",
            "product_id": "8310926033",
            "item_id": "1000",
            "price": Decimal("50.00"),
            "options": {"capacity": "1000ml"},
        }
        assert order["fulfillments"] == [
            {"tracking_id": ["123456789"], "item_ids": ["1000", "2000", "5000"]}
        ]
        assert order["payment_history"] == [
            {"transaction_type": "payment", "amount": Decimal("140.00"), "payment_method_id": CARD}
        ]

    async def test_money_is_written_with_two_decimals(self, tools: dict[str, BaseTool]) -> None:
        text = await call(tools["get_order_details"], order_id="#W0000001")
        assert '"amount":140.00' in text


class TestCancelPendingOrderTool:
    async def test_cancel_refunds_card_and_records_reason(
        self, db: AsyncConnectionPool[Any], tools: dict[str, BaseTool]
    ) -> None:
        text = await call(
            tools["cancel_pending_order"], order_id="#W0000001", reason="no longer needed"
        )
        assert parsed(text)["status"] == "cancelled"
        assert parsed(text)["cancel_reason"] == "no longer needed"
        row = await order_row(db, "#W0000001")
        assert (row["status"], row["cancel_reason"]) == ("cancelled", "no longer needed")
        assert await payments(db, "#W0000001") == [
            Transaction("payment", Decimal("140.00"), CARD),
            Transaction("refund", Decimal("140.00"), CARD),
        ]
        assert await balance(db) == Decimal("100.00")

    async def test_cancel_refunds_gift_card_immediately(
        self, db: AsyncConnectionPool[Any], tools: dict[str, BaseTool]
    ) -> None:
        await call(tools["cancel_pending_order"], order_id="#W0000002", reason="ordered by mistake")
        assert await balance(db) == Decimal("240.00")
        assert (await payments(db, "#W0000002"))[-1] == Transaction(
            "refund", Decimal("140.00"), GIFT
        )

    async def test_delivered_order_is_refused_and_nothing_changes(
        self, db: AsyncConnectionPool[Any], tools: dict[str, BaseTool]
    ) -> None:
        before = await f.snapshot(db)
        text = await call(
            tools["cancel_pending_order"], order_id="#W0000003", reason="no longer needed"
        )
        assert text.startswith("Error: order #W0000003 is 'delivered'")
        assert await f.snapshot(db) == before

    async def test_invalid_reason_is_refused_by_the_schema(
        self, db: AsyncConnectionPool[Any], tools: dict[str, BaseTool]
    ) -> None:
        before = await f.snapshot(db)
        text = await call(tools["cancel_pending_order"], order_id="#W0000001", reason="meh")
        assert text.startswith("Error: invalid arguments (reason:")
        assert await f.snapshot(db) == before
        assert await f.rows(db, "SELECT * FROM tool_executions") == []

    async def test_over_long_order_id_is_refused_by_the_schema(
        self, db: AsyncConnectionPool[Any], tools: dict[str, BaseTool]
    ) -> None:
        before = await f.snapshot(db)
        long_id = "#W" + "9" * 500
        text = await call(
            tools["cancel_pending_order"], order_id=long_id, reason="no longer needed"
        )
        assert text.startswith("Error: invalid arguments (order_id:")
        assert long_id not in text
        assert await f.snapshot(db) == before
        assert await f.rows(db, "SELECT * FROM tool_executions") == []


NEW_ADDRESS = {
    "address1": "9 Oak Ave",
    "address2": "",
    "city": "Boston",
    "state": "MA",
    "country": "USA",
    "zip": "02110",
}


class TestModifyPendingOrderAddressTool:
    async def test_address_is_replaced(
        self, db: AsyncConnectionPool[Any], tools: dict[str, BaseTool]
    ) -> None:
        text = await call(
            tools["modify_pending_order_address"], order_id="#W0000001", **NEW_ADDRESS
        )
        assert parsed(text)["address"] == NEW_ADDRESS
        row = await order_row(db, "#W0000001")
        assert {k: row[k] for k in NEW_ADDRESS} == NEW_ADDRESS
        assert row["status"] == "pending"

    async def test_blank_city_is_refused_and_nothing_changes(
        self, db: AsyncConnectionPool[Any], tools: dict[str, BaseTool]
    ) -> None:
        before = await f.snapshot(db)
        text = await call(
            tools["modify_pending_order_address"],
            order_id="#W0000001",
            **{**NEW_ADDRESS, "city": " "},
        )
        assert text == "Error: the address needs a non-empty city."
        assert await f.snapshot(db) == before


class TestModifyPendingOrderItemsTool:
    async def test_items_swapped_and_gift_card_charged(
        self, db: AsyncConnectionPool[Any], tools: dict[str, BaseTool]
    ) -> None:
        text = await call(
            tools["modify_pending_order_items"],
            order_id="#W0000001",
            item_ids=["1000", "5000"],
            new_item_ids=["2000", "6000"],
            payment_method_id=GIFT,
        )
        order = parsed(text)
        assert order["status"] == "pending (item modified)"
        assert [i["item_id"] for i in order["items"]] == ["2000", "2000", "6000"]
        items = await f.rows(
            db,
            "SELECT item_id, price, options FROM order_items WHERE order_id = %s ORDER BY position",
            "#W0000001",
        )
        assert items[0] == {
            "item_id": "2000",
            "price": Decimal("60.00"),
            "options": {"capacity": "2000ml"},
        }
        assert (await payments(db, "#W0000001"))[-1] == Transaction(
            "payment", Decimal("15.00"), GIFT
        )
        assert await balance(db) == Decimal("85.00")

    async def test_cheaper_item_refunds_to_gift_card(
        self, db: AsyncConnectionPool[Any], tools: dict[str, BaseTool]
    ) -> None:
        await call(
            tools["modify_pending_order_items"],
            order_id="#W0000001",
            item_ids=["1000"],
            new_item_ids=["3000"],
            payment_method_id=GIFT,
        )
        assert await balance(db) == Decimal("104.50")

    @pytest.mark.parametrize(
        ("item_ids", "new_item_ids", "method", "message"),
        [
            (["1000"], ["4000"], CARD, "Error: item 4000 is not available"),
            (["1000"], ["6000"], CARD, "Error: item 6000 is not a variant"),
            (["1000"], ["4000", "2000"], CARD, "Error: item_ids has 1 ids"),
            (["7777"], ["2000"], CARD, "Error: item 7777 is not in order"),
            (["1000"], ["2000"], "credit_card_bob", "Error: payment method credit_card_bob"),
        ],
    )
    async def test_refusals_change_nothing(
        self,
        db: AsyncConnectionPool[Any],
        tools: dict[str, BaseTool],
        item_ids: list[str],
        new_item_ids: list[str],
        method: str,
        message: str,
    ) -> None:
        before = await f.snapshot(db)
        text = await call(
            tools["modify_pending_order_items"],
            order_id="#W0000001",
            item_ids=item_ids,
            new_item_ids=new_item_ids,
            payment_method_id=method,
        )
        assert text.startswith(message)
        assert await f.snapshot(db) == before

    async def test_insufficient_gift_card_changes_nothing(
        self, db: AsyncConnectionPool[Any], tools: dict[str, BaseTool]
    ) -> None:
        async with db.connection() as conn:
            await conn.execute("UPDATE payment_methods SET balance = 5 WHERE id = %s", (GIFT,))
        before = await f.snapshot(db)
        text = await call(
            tools["modify_pending_order_items"],
            order_id="#W0000001",
            item_ids=["1000"],
            new_item_ids=["2000"],
            payment_method_id=GIFT,
        )
        assert "not enough" in text and text.startswith("Error:")
        assert await f.snapshot(db) == before


class TestModifyPendingOrderPaymentTool:
    async def test_new_method_paid_and_old_gift_card_refunded(
        self, db: AsyncConnectionPool[Any], tools: dict[str, BaseTool]
    ) -> None:
        await call(
            tools["modify_pending_order_payment"], order_id="#W0000002", payment_method_id=PAYPAL
        )
        assert await payments(db, "#W0000002") == [
            Transaction("payment", Decimal("140.00"), GIFT),
            Transaction("payment", Decimal("140.00"), PAYPAL),
            Transaction("refund", Decimal("140.00"), GIFT),
        ]
        assert await balance(db) == Decimal("240.00")
        assert (await order_row(db, "#W0000002"))["status"] == "pending"

    async def test_same_method_is_refused_and_nothing_changes(
        self, db: AsyncConnectionPool[Any], tools: dict[str, BaseTool]
    ) -> None:
        before = await f.snapshot(db)
        text = await call(
            tools["modify_pending_order_payment"], order_id="#W0000001", payment_method_id=CARD
        )
        assert text.startswith("Error:") and "must be different" in text
        assert await f.snapshot(db) == before


class TestReturnDeliveredOrderItemsTool:
    async def test_return_is_recorded_without_payment_entry(
        self, db: AsyncConnectionPool[Any], tools: dict[str, BaseTool]
    ) -> None:
        text = await call(
            tools["return_delivered_order_items"],
            order_id="#W0000003",
            item_ids=["5000", "1000"],
            payment_method_id=GIFT,
        )
        assert parsed(text)["return_items"] == ["1000", "5000"]
        row = await order_row(db, "#W0000003")
        assert row["status"] == "return requested"
        assert row["return_items"] == ["1000", "5000"]
        assert row["return_payment_method_id"] == GIFT
        assert len(await payments(db, "#W0000003")) == 1
        assert await balance(db) == Decimal("100.00")

    async def test_refund_to_other_method_is_refused_and_nothing_changes(
        self, db: AsyncConnectionPool[Any], tools: dict[str, BaseTool]
    ) -> None:
        before = await f.snapshot(db)
        text = await call(
            tools["return_delivered_order_items"],
            order_id="#W0000003",
            item_ids=["1000"],
            payment_method_id=PAYPAL,
        )
        assert text.startswith("Error: the refund must go to the original payment method")
        assert await f.snapshot(db) == before


class TestExchangeDeliveredOrderItemsTool:
    async def test_exchange_is_recorded_without_payment_entry(
        self, db: AsyncConnectionPool[Any], tools: dict[str, BaseTool]
    ) -> None:
        await call(
            tools["exchange_delivered_order_items"],
            order_id="#W0000003",
            item_ids=["2000", "1000"],
            new_item_ids=["3000", "2000"],
            payment_method_id=PAYPAL,
        )
        row = await order_row(db, "#W0000003")
        assert row["status"] == "exchange requested"
        assert row["exchange_items"] == ["1000", "2000"]
        assert row["exchange_new_items"] == ["2000", "3000"]
        assert row["exchange_payment_method_id"] == PAYPAL
        assert row["exchange_price_difference"] == Decimal("-4.50")
        assert len(await payments(db, "#W0000003")) == 1

    async def test_pending_order_is_refused_and_nothing_changes(
        self, db: AsyncConnectionPool[Any], tools: dict[str, BaseTool]
    ) -> None:
        before = await f.snapshot(db)
        text = await call(
            tools["exchange_delivered_order_items"],
            order_id="#W0000001",
            item_ids=["1000"],
            new_item_ids=["2000"],
            payment_method_id=PAYPAL,
        )
        assert text.startswith("Error: order #W0000001 is 'pending'")
        assert await f.snapshot(db) == before


class TestWritesAreAudited:
    async def test_success_and_refusal_each_leave_one_audit_row(
        self, db: AsyncConnectionPool[Any], tools: dict[str, BaseTool]
    ) -> None:
        await call(
            tools["cancel_pending_order"], "c1", order_id="#W0000001", reason="no longer needed"
        )
        await call(
            tools["cancel_pending_order"], "c2", order_id="#W0000003", reason="no longer needed"
        )
        audit = await f.rows(
            db, "SELECT actor, customer_id, thread_id, tool_name, arguments, ok FROM audit_log"
            " ORDER BY id"
        )  # fmt: skip
        assert [a["ok"] for a in audit] == [True, False]
        assert audit[0] == {
            "actor": "customer:sara_doe_496",
            "customer_id": SARA,
            "thread_id": "sara_doe_496:s1",
            "tool_name": "cancel_pending_order",
            "arguments": {"order_id": "#W0000001", "reason": "no longer needed"},
            "ok": True,
        }
