"""Domain values as the tau-bench retail JSON objects, the ids each one is about, and the
observations the tools make of them."""

from __future__ import annotations

from collections.abc import Callable, Mapping
from typing import Any

from app.db.writes import WriteOutcome
from app.domain.models import Address, Customer, Order, PaymentMethod, Product
from app.tools.results import Observation, failed_with, found
from app.tools.text import customer_lines, order_lines, product_lines


def address_view(a: Address) -> dict[str, str]:
    return {
        "address1": a.address1,
        "address2": a.address2,
        "city": a.city,
        "country": a.country,
        "state": a.state,
        "zip": a.zip,
    }


def payment_method_view(m: PaymentMethod) -> dict[str, Any]:
    view: dict[str, Any] = {"source": m.source}
    if m.source == "credit_card":
        view |= {"brand": m.brand, "last_four": m.last_four}
    elif m.source == "gift_card":
        view["balance"] = m.balance
    view["id"] = m.id
    return view


def customer_view(c: Customer) -> dict[str, Any]:
    return {
        "user_id": c.id,
        "name": {"first_name": c.first_name, "last_name": c.last_name},
        "address": address_view(c.address),
        "email": c.email,
        "payment_methods": {m.id: payment_method_view(m) for m in c.payment_methods},
        "orders": list(c.order_ids),
    }


def order_view(o: Order) -> dict[str, Any]:
    view: dict[str, Any] = {
        "order_id": o.id,
        "user_id": o.customer_id,
        "address": address_view(o.address),
        "items": [
            {
                "name": i.name,
                "product_id": i.product_id,
                "item_id": i.item_id,
                "price": i.price,
                "options": i.options,
            }
            for i in o.items
        ],
        "fulfillments": [
            {"tracking_id": list(f.tracking_ids), "item_ids": list(f.item_ids)}
            for f in o.fulfillments
        ],
        "status": o.status,
        "payment_history": [
            {
                "transaction_type": t.transaction_type,
                "amount": t.amount,
                "payment_method_id": t.payment_method_id,
            }
            for t in o.payment_history
        ],
    }
    recorded: dict[str, Any] = {
        "cancel_reason": o.cancel_reason,
        "return_items": o.return_items,
        "return_payment_method_id": o.return_payment_method_id,
        "exchange_items": o.exchange_items,
        "exchange_new_items": o.exchange_new_items,
        "exchange_payment_method_id": o.exchange_payment_method_id,
        "exchange_price_difference": o.exchange_price_difference,
    }
    view |= {k: v for k, v in recorded.items() if v is not None}
    view |= {k: v for k, v in o.extra.items() if k not in view}
    return view


def product_view(p: Product) -> dict[str, Any]:
    return {
        "name": p.name,
        "product_id": p.id,
        "variants": {
            v.item_id: {
                "item_id": v.item_id,
                "options": v.options,
                "available": v.available,
                "price": v.price,
            }
            for v in p.variants
        },
    }


def order_ids(view: Mapping[str, Any]) -> dict[str, list[str]]:
    """The order, its customer, the payment methods it was paid or refunded with, and the
    products of its items."""
    return {
        "order": [view.get("order_id")],
        "customer": [view.get("user_id")],
        "payment_method": [_field(t, "payment_method_id") for t in _each(view, "payment_history")],
        "product": [_field(i, "product_id") for i in _each(view, "items")],
    }


def customer_ids(view: Mapping[str, Any]) -> dict[str, list[str]]:
    methods = view.get("payment_methods")
    return {
        "customer": [view.get("user_id")],
        "payment_method": list(methods) if isinstance(methods, Mapping) else [],
    }


def order_found(view: Mapping[str, Any]) -> Observation:
    return found(view, order_lines, ids=order_ids(view))


def customer_found(view: Mapping[str, Any]) -> Observation:
    return found(view, customer_lines, ids=customer_ids(view))


def product_found(p: Product) -> Observation:
    return found(product_view(p), product_lines, ids={"product": [p.id]})


def order_outcome(outcome: WriteOutcome) -> Observation:
    """An order write, fresh or recorded: the order as it was saved (`order_view`)."""
    return _recorded(outcome, order_found)


def customer_outcome(outcome: WriteOutcome) -> Observation:
    return _recorded(outcome, customer_found)


def _recorded(
    outcome: WriteOutcome, observe: Callable[[Mapping[str, Any]], Observation]
) -> Observation:
    if not outcome.ok:
        return failed_with("refused", outcome.text)
    return found(outcome.text) if outcome.data is None else observe(outcome.data)


def _each(view: Mapping[str, Any], key: str) -> list[Mapping[str, Any]]:
    value = view.get(key)
    return [v for v in value if isinstance(v, Mapping)] if isinstance(value, list) else []


def _field(value: Mapping[str, Any], key: str) -> Any:
    return value.get(key)
