from __future__ import annotations

from dataclasses import replace
from decimal import Decimal

import pytest

from app.domain.errors import RuleViolation
from app.domain.models import Address, Transaction
from app.domain.pending_orders import (
    cancel_pending_order,
    modify_pending_order_address,
    modify_pending_order_items,
    modify_pending_order_payment,
)
from tests import factories as f

PRODUCTS = {p.id: p for p in (f.bottle(unavailable=("4000",)), f.lamp())}
NEW_HOME = Address("9 Oak Ave", "", "Boston", "MA", "USA", "02110")


class TestCancelPendingOrder:
    def test_cancel_sets_status_reason_and_refunds_each_payment(self) -> None:
        change = cancel_pending_order(f.order(), f.customer(), "no longer needed")
        assert change.order.status == "cancelled"
        assert change.order.cancel_reason == "no longer needed"
        assert change.order.payment_history[-1] == Transaction(
            "refund", Decimal("140.00"), "credit_card_1111111"
        )
        assert change.balance_deltas == {}

    def test_cancel_refunds_gift_card_immediately(self) -> None:
        o = f.order(paid_with="gift_card_2222222")
        change = cancel_pending_order(o, f.customer(), "ordered by mistake")
        assert change.balance_deltas == {"gift_card_2222222": Decimal("140.00")}

    def test_cancel_refunds_split_payments_in_order(self) -> None:
        payments = (
            Transaction("payment", Decimal("100.00"), "gift_card_2222222"),
            Transaction("payment", Decimal("40.00"), "paypal_3333333"),
        )
        change = cancel_pending_order(f.order(payments=payments), f.customer(), "no longer needed")
        assert change.order.payment_history[2:] == (
            Transaction("refund", Decimal("100.00"), "gift_card_2222222"),
            Transaction("refund", Decimal("40.00"), "paypal_3333333"),
        )
        assert change.balance_deltas == {"gift_card_2222222": Decimal("100.00")}

    def test_cancel_after_payment_change_refunds_only_the_current_method(self) -> None:
        o = modify_pending_order_payment(f.order(), f.customer(), "paypal_3333333").order
        change = cancel_pending_order(o, f.customer(), "no longer needed")
        assert change.order.payment_history[len(o.payment_history) :] == (
            Transaction("refund", Decimal("140.00"), "paypal_3333333"),
        )

    @pytest.mark.parametrize("reason", ["No longer needed", "changed my mind", ""])
    def test_cancel_rejects_other_reasons(self, reason: str) -> None:
        with pytest.raises(RuleViolation, match="no longer needed"):
            cancel_pending_order(f.order(), f.customer(), reason)

    @pytest.mark.parametrize("status", ["processed", "delivered", "pending (item modified)"])
    def test_cancel_requires_exactly_pending(self, status: str) -> None:
        with pytest.raises(RuleViolation, match="only pending orders can be cancelled"):
            cancel_pending_order(f.order(status=status), f.customer(), "no longer needed")  # type: ignore[arg-type]


class TestModifyPendingOrderAddress:
    def test_address_is_replaced(self) -> None:
        change = modify_pending_order_address(f.order(), NEW_HOME)
        assert change.order.address == NEW_HOME
        assert change.order.status == "pending"
        assert change.balance_deltas == {}

    def test_non_pending_order_is_refused(self) -> None:
        with pytest.raises(RuleViolation, match="only pending orders can be modified"):
            modify_pending_order_address(f.order(status="processed"), NEW_HOME)


class TestModifyPendingOrderItems:
    def test_more_expensive_item_appends_payment_and_takes_new_item_fields(self) -> None:
        change = modify_pending_order_items(
            f.order(), f.customer(), PRODUCTS, ["1000"], ["2000"], "credit_card_1111111"
        )
        assert change.order.items[0].item_id == "2000"
        assert change.order.items[0].price == Decimal("60.00")
        assert change.order.items[0].options == {"capacity": "2000ml"}
        assert change.order.status == "pending (item modified)"
        assert change.order.payment_history[-1] == Transaction(
            "payment", Decimal("10.00"), "credit_card_1111111"
        )
        assert change.balance_deltas == {}

    def test_cheaper_item_refunds_difference_to_gift_card(self) -> None:
        change = modify_pending_order_items(
            f.order(), f.customer(), PRODUCTS, ["1000"], ["3000"], "gift_card_2222222"
        )
        assert change.order.payment_history[-1] == Transaction(
            "refund", Decimal("4.50"), "gift_card_2222222"
        )
        assert change.balance_deltas == {"gift_card_2222222": Decimal("4.50")}

    def test_gift_card_pays_positive_difference(self) -> None:
        change = modify_pending_order_items(
            f.order(), f.customer(), PRODUCTS, ["1000"], ["2000"], "gift_card_2222222"
        )
        assert change.order.payment_history[-1] == Transaction(
            "payment", Decimal("10.00"), "gift_card_2222222"
        )
        assert change.balance_deltas == {"gift_card_2222222": Decimal("-10.00")}

    def test_zero_difference_appends_zero_refund_like_tau_bench(self) -> None:
        change = modify_pending_order_items(
            f.order(), f.customer(), PRODUCTS, ["1000", "2000"], ["2000", "1000"],
            "gift_card_2222222",
        )  # fmt: skip
        assert change.order.payment_history[-1] == Transaction(
            "refund", Decimal("0.00"), "gift_card_2222222"
        )
        assert change.balance_deltas == {"gift_card_2222222": Decimal("0.00")}

    def test_duplicates_replace_successive_items(self) -> None:
        b = f.bottle()
        o = f.order(items=(f.item_of(b, "1000"), f.item_of(b, "1000")))
        change = modify_pending_order_items(
            o, f.customer(), PRODUCTS, ["1000", "1000"], ["2000", "3000"], "paypal_3333333"
        )
        assert [i.item_id for i in change.order.items] == ["2000", "3000"]
        assert change.order.payment_history[-1].amount == Decimal("5.50")

    def test_insufficient_gift_card_balance_is_refused(self) -> None:
        poor = f.customer(payment_methods=(f.gift_card(balance="5.00"),))
        with pytest.raises(RuleViolation, match="not enough"):
            modify_pending_order_items(
                f.order(), poor, PRODUCTS, ["1000"], ["2000"], "gift_card_2222222"
            )

    def test_item_not_in_order_is_refused(self) -> None:
        with pytest.raises(RuleViolation, match="item 9999 is not in order"):
            modify_pending_order_items(
                f.order(), f.customer(), PRODUCTS, ["9999"], ["2000"], "paypal_3333333"
            )

    def test_duplicate_beyond_quantity_is_refused(self) -> None:
        with pytest.raises(RuleViolation, match="appears 2 times"):
            modify_pending_order_items(
                f.order(), f.customer(), PRODUCTS, ["1000", "1000"], ["2000", "3000"],
                "paypal_3333333",
            )  # fmt: skip

    def test_unequal_lists_are_refused(self) -> None:
        with pytest.raises(RuleViolation, match="exactly one new item"):
            modify_pending_order_items(
                f.order(), f.customer(), PRODUCTS, ["1000"], ["2000", "3000"], "paypal_3333333"
            )

    def test_empty_lists_are_refused(self) -> None:
        with pytest.raises(RuleViolation, match="at least one"):
            modify_pending_order_items(f.order(), f.customer(), PRODUCTS, [], [], "paypal_3333333")

    def test_new_item_of_another_product_is_refused(self) -> None:
        with pytest.raises(RuleViolation, match="same product"):
            modify_pending_order_items(
                f.order(), f.customer(), PRODUCTS, ["1000"], ["6000"], "paypal_3333333"
            )

    def test_unavailable_new_item_is_refused(self) -> None:
        with pytest.raises(RuleViolation, match="not available"):
            modify_pending_order_items(
                f.order(), f.customer(), PRODUCTS, ["1000"], ["4000"], "paypal_3333333"
            )

    def test_same_item_is_refused(self) -> None:
        with pytest.raises(RuleViolation, match="same as the item it replaces"):
            modify_pending_order_items(
                f.order(), f.customer(), PRODUCTS, ["1000"], ["1000"], "paypal_3333333"
            )

    def test_foreign_payment_method_is_refused(self) -> None:
        with pytest.raises(RuleViolation, match="payment method credit_card_999 was not found"):
            modify_pending_order_items(
                f.order(), f.customer(), PRODUCTS, ["1000"], ["2000"], "credit_card_999"
            )

    def test_second_modification_is_refused(self) -> None:
        once = modify_pending_order_items(
            f.order(), f.customer(), PRODUCTS, ["1000"], ["2000"], "paypal_3333333"
        ).order
        with pytest.raises(RuleViolation, match="'pending \\(item modified\\)'"):
            modify_pending_order_items(
                once, f.customer(), PRODUCTS, ["5000"], ["6000"], "paypal_3333333"
            )


class TestModifyPendingOrderPayment:
    def test_appends_payment_then_refund(self) -> None:
        change = modify_pending_order_payment(f.order(), f.customer(), "paypal_3333333")
        assert change.order.payment_history[1:] == (
            Transaction("payment", Decimal("140.00"), "paypal_3333333"),
            Transaction("refund", Decimal("140.00"), "credit_card_1111111"),
        )
        assert change.order.status == "pending"
        assert change.balance_deltas == {}

    def test_gift_card_balances_move_on_both_sides(self) -> None:
        rich = f.customer(
            payment_methods=(f.gift_card("gift_card_a", "500.00"), f.gift_card("gift_card_b"))
        )
        o = f.order(paid_with="gift_card_b")
        change = modify_pending_order_payment(o, rich, "gift_card_a")
        assert change.balance_deltas == {
            "gift_card_a": Decimal("-140.00"),
            "gift_card_b": Decimal("140.00"),
        }

    def test_insufficient_gift_card_is_refused(self) -> None:
        with pytest.raises(RuleViolation, match="not enough"):
            modify_pending_order_payment(f.order(), f.customer(), "gift_card_2222222")

    def test_same_method_is_refused(self) -> None:
        with pytest.raises(RuleViolation, match="must be different"):
            modify_pending_order_payment(f.order(), f.customer(), "credit_card_1111111")

    def test_foreign_method_is_refused(self) -> None:
        with pytest.raises(RuleViolation, match="was not found for this customer"):
            modify_pending_order_payment(f.order(), f.customer(), "paypal_other")

    def test_order_with_more_than_one_entry_is_refused(self) -> None:
        once = modify_pending_order_payment(f.order(), f.customer(), "paypal_3333333").order
        with pytest.raises(RuleViolation, match="exactly one payment"):
            modify_pending_order_payment(once, f.customer(), "credit_card_1111111")

    def test_history_whose_only_entry_is_a_refund_is_refused(self) -> None:
        o = replace(
            f.order(),
            payment_history=(Transaction("refund", Decimal("1.00"), "credit_card_1111111"),),
        )
        with pytest.raises(RuleViolation, match="exactly one payment"):
            modify_pending_order_payment(o, f.customer(), "paypal_3333333")

    def test_non_pending_order_is_refused(self) -> None:
        with pytest.raises(RuleViolation, match="only pending orders"):
            modify_pending_order_payment(
                f.order(status="delivered"), f.customer(), "paypal_3333333"
            )
