"""Domain values as the tau-bench retail JSON objects the model reads."""

from __future__ import annotations

from typing import Any

from app.domain.models import Address, Customer, Order, PaymentMethod, Product
from app.jsontext import compact_json


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


def order_json(o: Order) -> str:
    return compact_json(order_view(o))


def customer_json(c: Customer) -> str:
    return compact_json(customer_view(c))


def product_json(p: Product) -> str:
    return compact_json(product_view(p))
