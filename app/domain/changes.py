"""What a write rule returns, and the checks several rules share."""

from __future__ import annotations

from collections import Counter
from collections.abc import Mapping, Sequence
from dataclasses import dataclass, field
from decimal import Decimal

from app.domain.errors import RuleViolation
from app.domain.models import Customer, Order, OrderStatus, PaymentMethod


@dataclass(frozen=True)
class OrderChange:
    """The order after the rule, plus gift-card balance moves {payment_method_id: delta}."""

    order: Order
    balance_deltas: Mapping[str, Decimal] = field(default_factory=dict)


def require_status(order: Order, status: OrderStatus, action: str) -> None:
    if order.status != status:
        raise RuleViolation(
            f"order {order.id} is '{order.status}'; only {status} orders can be {action}."
        )


def require_payment_method(customer: Customer, payment_method_id: str) -> PaymentMethod:
    method = customer.payment_method(payment_method_id)
    if method is None:
        raise RuleViolation(
            f"payment method {payment_method_id} was not found for this customer; "
            "use one of the ids listed in the user details."
        )
    return method


def is_gift_card(customer: Customer, payment_method_id: str) -> bool:
    method = customer.payment_method(payment_method_id)
    return method is not None and method.source == "gift_card"


def require_gift_card_covers(method: PaymentMethod, amount: Decimal, purpose: str) -> None:
    """A gift card must hold `amount`; other methods are not checked."""
    if method.source != "gift_card" or amount <= 0:
        return
    balance = method.balance or Decimal("0")
    if balance < amount:
        raise RuleViolation(
            f"gift card {method.id} holds {balance:.2f}, not enough to pay {amount:.2f} "
            f"for {purpose}; choose another payment method."
        )


def require_items_present(order: Order, item_ids: Sequence[str]) -> None:
    """Every id must be in the order, counting duplicates."""
    if not item_ids:
        raise RuleViolation("item_ids must list at least one item id from the order.")
    held = Counter(item.item_id for item in order.items)
    for item_id, wanted in Counter(item_ids).items():
        if wanted > held[item_id]:
            if held[item_id] == 0:
                raise RuleViolation(f"item {item_id} is not in order {order.id}.")
            raise RuleViolation(
                f"item {item_id} appears {wanted} times in item_ids but only "
                f"{held[item_id]} times in order {order.id}."
            )


def add_delta(deltas: dict[str, Decimal], payment_method_id: str, amount: Decimal) -> None:
    deltas[payment_method_id] = deltas.get(payment_method_id, Decimal("0")) + amount
