"""The shop's data as plain, immutable values. Money is always `Decimal`."""

from __future__ import annotations

from dataclasses import dataclass, field
from decimal import Decimal
from typing import Any, Literal

OrderStatus = Literal[
    "pending",
    "processed",
    "delivered",
    "cancelled",
    "pending (item modified)",
    "return requested",
    "exchange requested",
]
ORDER_STATUSES: tuple[OrderStatus, ...] = (
    "pending",
    "processed",
    "delivered",
    "cancelled",
    "pending (item modified)",
    "return requested",
    "exchange requested",
)
PaymentSource = Literal["credit_card", "gift_card", "paypal"]
CENT = Decimal("0.01")


def money(value: Decimal | int | float | str) -> Decimal:
    """Normalise to two decimals. Floats go through `str` so 0.1 stays 0.10."""
    if isinstance(value, float):
        value = str(value)
    return Decimal(value).quantize(CENT)


@dataclass(frozen=True)
class Address:
    address1: str
    address2: str
    city: str
    state: str
    country: str
    zip: str


@dataclass(frozen=True)
class PaymentMethod:
    id: str
    source: PaymentSource
    brand: str | None = None
    last_four: str | None = None
    balance: Decimal | None = None


@dataclass(frozen=True)
class Customer:
    id: str
    first_name: str
    last_name: str
    email: str
    address: Address
    payment_methods: tuple[PaymentMethod, ...] = ()
    order_ids: tuple[str, ...] = ()

    def payment_method(self, method_id: str) -> PaymentMethod | None:
        return next((m for m in self.payment_methods if m.id == method_id), None)


@dataclass(frozen=True)
class Variant:
    item_id: str
    product_id: str
    options: dict[str, Any]
    price: Decimal
    available: bool


@dataclass(frozen=True)
class Product:
    id: str
    name: str
    variants: tuple[Variant, ...] = ()


@dataclass(frozen=True)
class OrderItem:
    product_id: str
    item_id: str
    name: str
    price: Decimal
    options: dict[str, Any]


@dataclass(frozen=True)
class Fulfillment:
    tracking_ids: tuple[str, ...]
    item_ids: tuple[str, ...]


@dataclass(frozen=True)
class Transaction:
    transaction_type: Literal["payment", "refund"]
    amount: Decimal
    payment_method_id: str


@dataclass(frozen=True)
class Order:
    id: str
    customer_id: str
    address: Address
    status: OrderStatus
    items: tuple[OrderItem, ...] = ()
    fulfillments: tuple[Fulfillment, ...] = ()
    payment_history: tuple[Transaction, ...] = ()
    cancel_reason: str | None = None
    return_items: tuple[str, ...] | None = None
    return_payment_method_id: str | None = None
    exchange_items: tuple[str, ...] | None = None
    exchange_new_items: tuple[str, ...] | None = None
    exchange_payment_method_id: str | None = None
    exchange_price_difference: Decimal | None = None
    extra: dict[str, Any] = field(default_factory=dict)
