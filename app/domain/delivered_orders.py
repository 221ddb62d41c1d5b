"""Rules for delivered orders: a return or an exchange is requested once."""

from __future__ import annotations

from collections.abc import Mapping, Sequence
from dataclasses import replace

from app.domain.changes import (
    OrderChange,
    require_gift_card_covers,
    require_items_present,
    require_payment_method,
    require_status,
)
from app.domain.errors import RuleViolation
from app.domain.models import Customer, Order, Product
from app.domain.swaps import swap_items


def return_delivered_order_items(
    order: Order, customer: Customer, item_ids: Sequence[str], payment_method_id: str
) -> OrderChange:
    """Request a return; the refund goes to the original method or a gift card."""
    require_status(order, "delivered", "returned")
    method = require_payment_method(customer, payment_method_id)
    original = _original_payment_method_id(order)
    if method.source != "gift_card" and payment_method_id != original:
        raise RuleViolation(
            f"the refund must go to the original payment method ({original}) "
            "or to one of the customer's gift cards."
        )
    require_items_present(order, item_ids)
    requested = replace(
        order,
        status="return requested",
        return_items=tuple(sorted(item_ids)),
        return_payment_method_id=payment_method_id,
    )
    return OrderChange(order=requested)


def exchange_delivered_order_items(
    order: Order,
    customer: Customer,
    products: Mapping[str, Product],
    item_ids: Sequence[str],
    new_item_ids: Sequence[str],
    payment_method_id: str,
) -> OrderChange:
    """Request an exchange; the price difference is settled when the items come back."""
    require_status(order, "delivered", "exchanged")
    difference = swap_items(order, products, item_ids, new_item_ids).price_difference
    method = require_payment_method(customer, payment_method_id)
    require_gift_card_covers(method, difference, "the price difference")
    requested = replace(
        order,
        status="exchange requested",
        exchange_items=tuple(sorted(item_ids)),
        exchange_new_items=tuple(sorted(new_item_ids)),
        exchange_payment_method_id=payment_method_id,
        exchange_price_difference=difference,
    )
    return OrderChange(order=requested)


def _original_payment_method_id(order: Order) -> str | None:
    payment = next((t for t in order.payment_history if t.transaction_type == "payment"), None)
    return payment.payment_method_id if payment else None
