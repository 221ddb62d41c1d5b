from __future__ import annotations

from decimal import Decimal

import pytest

from app.domain.delivered_orders import (
    exchange_delivered_order_items,
    return_delivered_order_items,
)
from app.domain.errors import RuleViolation
from app.domain.models import Order
from tests import factories as f

PRODUCTS = {p.id: p for p in (f.bottle(unavailable=("4000",)), f.lamp())}


def delivered(paid_with: str = "credit_card_1111111") -> Order:
    return f.order(status="delivered", paid_with=paid_with)


class TestReturnDeliveredOrderItems:
    def test_return_records_sorted_items_and_refund_method(self) -> None:
        change = return_delivered_order_items(
            delivered(), f.customer(), ["5000", "1000"], "credit_card_1111111"
        )
        assert change.order.status == "return requested"
        assert change.order.return_items == ("1000", "5000")
        assert change.order.return_payment_method_id == "credit_card_1111111"
        assert change.order.payment_history == delivered().payment_history
        assert change.balance_deltas == {}

    def test_refund_may_go_to_a_gift_card(self) -> None:
        change = return_delivered_order_items(
            delivered(), f.customer(), ["1000"], "gift_card_2222222"
        )
        assert change.order.return_payment_method_id == "gift_card_2222222"

    def test_refund_to_another_non_gift_method_is_refused(self) -> None:
        with pytest.raises(RuleViolation, match="original payment method"):
            return_delivered_order_items(delivered(), f.customer(), ["1000"], "paypal_3333333")

    def test_foreign_method_is_refused(self) -> None:
        with pytest.raises(RuleViolation, match="not found for this customer"):
            return_delivered_order_items(delivered(), f.customer(), ["1000"], "gift_card_other")

    def test_missing_item_is_refused(self) -> None:
        with pytest.raises(RuleViolation, match="not in order"):
            return_delivered_order_items(delivered(), f.customer(), ["7777"], "credit_card_1111111")

    def test_duplicate_beyond_quantity_is_refused(self) -> None:
        with pytest.raises(RuleViolation, match="appears 2 times"):
            return_delivered_order_items(
                delivered(), f.customer(), ["1000", "1000"], "credit_card_1111111"
            )

    def test_empty_item_list_is_refused(self) -> None:
        with pytest.raises(RuleViolation, match="at least one"):
            return_delivered_order_items(delivered(), f.customer(), [], "credit_card_1111111")

    @pytest.mark.parametrize("status", ["pending", "processed", "return requested"])
    def test_non_delivered_order_is_refused(self, status: str) -> None:
        o = f.order(status=status)  # type: ignore[arg-type]
        with pytest.raises(RuleViolation, match="only delivered orders can be returned"):
            return_delivered_order_items(o, f.customer(), ["1000"], "credit_card_1111111")


class TestExchangeDeliveredOrderItems:
    def test_exchange_records_sorted_items_and_difference(self) -> None:
        change = exchange_delivered_order_items(
            delivered(), f.customer(), PRODUCTS, ["5000", "1000"], ["6000", "3000"],
            "paypal_3333333",
        )  # fmt: skip
        o = change.order
        assert o.status == "exchange requested"
        assert o.exchange_items == ("1000", "5000")
        assert o.exchange_new_items == ("3000", "6000")
        assert o.exchange_payment_method_id == "paypal_3333333"
        assert o.exchange_price_difference == Decimal("0.50")
        assert o.items == delivered().items
        assert o.payment_history == delivered().payment_history
        assert change.balance_deltas == {}

    def test_negative_difference_is_allowed_on_any_method(self) -> None:
        poor = f.customer(payment_methods=(f.gift_card(balance="0.00"),))
        change = exchange_delivered_order_items(
            delivered("gift_card_2222222"), poor, PRODUCTS, ["1000"], ["3000"],
            "gift_card_2222222",
        )  # fmt: skip
        assert change.order.exchange_price_difference == Decimal("-4.50")

    def test_gift_card_must_cover_positive_difference(self) -> None:
        poor = f.customer(payment_methods=(f.gift_card(balance="9.99"),))
        with pytest.raises(RuleViolation, match="not enough"):
            exchange_delivered_order_items(
                delivered(), poor, PRODUCTS, ["1000"], ["2000"], "gift_card_2222222"
            )

    def test_unavailable_new_item_is_refused(self) -> None:
        with pytest.raises(RuleViolation, match="not available"):
            exchange_delivered_order_items(
                delivered(), f.customer(), PRODUCTS, ["1000"], ["4000"], "paypal_3333333"
            )

    def test_new_item_of_another_product_is_refused(self) -> None:
        with pytest.raises(RuleViolation, match="same product"):
            exchange_delivered_order_items(
                delivered(), f.customer(), PRODUCTS, ["5000"], ["2000"], "paypal_3333333"
            )

    def test_unequal_lists_are_refused(self) -> None:
        with pytest.raises(RuleViolation, match="exactly one new item"):
            exchange_delivered_order_items(
                delivered(), f.customer(), PRODUCTS, ["1000", "2000"], ["3000"], "paypal_3333333"
            )

    def test_foreign_method_is_refused(self) -> None:
        with pytest.raises(RuleViolation, match="not found for this customer"):
            exchange_delivered_order_items(
                delivered(), f.customer(), PRODUCTS, ["1000"], ["2000"], "paypal_x"
            )

    def test_non_delivered_order_is_refused(self) -> None:
        with pytest.raises(RuleViolation, match="only delivered orders can be exchanged"):
            exchange_delivered_order_items(
                f.order(), f.customer(), PRODUCTS, ["1000"], ["2000"], "paypal_3333333"
            )
