"""Rules for orders that have not shipped yet (status `pending`)."""

from __future__ import annotations

from collections.abc import Mapping, Sequence
from dataclasses import replace
from decimal import Decimal

from app.domain.changes import (
    OrderChange,
    add_delta,
    is_gift_card,
    require_gift_card_covers,
    require_payment_method,
    require_status,
)
from app.domain.errors import RuleViolation
from app.domain.models import Address, Customer, Order, Product, Transaction
from app.domain.swaps import swap_items

CANCEL_REASONS = ("no longer needed", "ordered by mistake")


def cancel_pending_order(order: Order, customer: Customer, reason: str) -> OrderChange:
    """Cancel and refund every payment to the method it came from."""
    if reason not in CANCEL_REASONS:
        raise RuleViolation("reason must be exactly 'no longer needed' or 'ordered by mistake'.")
    require_status(order, "pending", "cancelled")
    refunds = _refunds_for(order.payment_history)
    deltas: dict[str, Decimal] = {}
    for refund in refunds:
        if is_gift_card(customer, refund.payment_method_id):
            add_delta(deltas, refund.payment_method_id, refund.amount)
    cancelled = replace(
        order,
        status="cancelled",
        cancel_reason=reason,
        payment_history=(*order.payment_history, *refunds),
    )
    return OrderChange(order=cancelled, balance_deltas=deltas)


def _refunds_for(history: Sequence[Transaction]) -> list[Transaction]:
    """One refund per payment entry, less what was already refunded to that method.

    A plain pending order has one payment, so this is one refund of the same amount. After a
    payment-method change the history is [payment A, payment B, refund A]: A is already
    whole, so only B is refunded (tau-bench would refund A twice).
    """
    already_refunded: dict[str, Decimal] = {}
    for entry in history:
        if entry.transaction_type == "refund":
            add_delta(already_refunded, entry.payment_method_id, entry.amount)
    refunds = []
    for entry in history:
        if entry.transaction_type != "payment":
            continue
        method_id = entry.payment_method_id
        offset = min(entry.amount, already_refunded.get(method_id, Decimal("0")))
        if offset == 0:
            refunds.append(Transaction("refund", entry.amount, method_id))
            continue
        already_refunded[method_id] -= offset
        if entry.amount > offset:
            refunds.append(Transaction("refund", entry.amount - offset, method_id))
    return refunds


def modify_pending_order_address(order: Order, address: Address) -> OrderChange:
    require_status(order, "pending", "modified")
    return OrderChange(order=replace(order, address=address))


def modify_pending_order_items(
    order: Order,
    customer: Customer,
    products: Mapping[str, Product],
    item_ids: Sequence[str],
    new_item_ids: Sequence[str],
    payment_method_id: str,
) -> OrderChange:
    """Swap items for other variants; settle the price difference with one entry."""
    require_status(order, "pending", "modified")
    swap = swap_items(order, products, item_ids, new_item_ids)
    method = require_payment_method(customer, payment_method_id)
    difference = swap.price_difference
    require_gift_card_covers(method, difference, "the new items")
    entry = Transaction(
        "payment" if difference > 0 else "refund", abs(difference), payment_method_id
    )
    deltas: dict[str, Decimal] = {}
    if method.source == "gift_card":
        add_delta(deltas, payment_method_id, -difference)
    modified = replace(
        order,
        items=swap.items,
        status="pending (item modified)",
        payment_history=(*order.payment_history, entry),
    )
    return OrderChange(order=modified, balance_deltas=deltas)


def modify_pending_order_payment(
    order: Order, customer: Customer, payment_method_id: str
) -> OrderChange:
    """Pay with a new method and refund the old one, for the order's single payment."""
    require_status(order, "pending", "modified")
    method = require_payment_method(customer, payment_method_id)
    history = order.payment_history
    if len(history) != 1 or history[0].transaction_type != "payment":
        raise RuleViolation(
            f"order {order.id} must have exactly one payment to change its payment method."
        )
    old = history[0]
    if old.payment_method_id == payment_method_id:
        raise RuleViolation(
            f"order {order.id} is already paid with {payment_method_id}; "
            "the new payment method must be different."
        )
    require_gift_card_covers(method, old.amount, f"order {order.id}")
    deltas: dict[str, Decimal] = {}
    if method.source == "gift_card":
        add_delta(deltas, payment_method_id, -old.amount)
    if is_gift_card(customer, old.payment_method_id):
        add_delta(deltas, old.payment_method_id, old.amount)
    entries = (
        Transaction("payment", old.amount, payment_method_id),
        Transaction("refund", old.amount, old.payment_method_id),
    )
    changed = replace(order, payment_history=(*history, *entries))
    return OrderChange(order=changed, balance_deltas=deltas)
