"""What an import reads and an export writes: the tau-bench objects, the tables, the errors."""

from __future__ import annotations

from dataclasses import dataclass, field
from typing import Any, get_args

from psycopg import AsyncConnection
from psycopg_pool import AsyncConnectionPool

from app.domain.models import PaymentSource

Json = dict[str, Any]
Connectable = AsyncConnection[Any] | AsyncConnectionPool[Any]
FILES = ("users", "products", "orders")
# Every table import writes. `replace` empties exactly these; the write ledger, audit log and
# handoff tickets are the humans' record and stay.
SHOP_TABLES = (
    "customers, payment_methods, products, variants, orders, order_items, fulfillments, "
    "payment_transactions"
)
PAYMENT_SOURCES: tuple[str, ...] = get_args(PaymentSource)
ORDER_OPTIONAL = (
    "cancel_reason",
    "return_items",
    "return_payment_method_id",
    "exchange_items",
    "exchange_new_items",
    "exchange_payment_method_id",
    "exchange_price_difference",
)


class TransferError(ValueError):
    """An import or export that cannot go ahead. `message` is safe to show to an operator.

    A `ValueError`, so the CLI reports it in one line like any other bad input.
    """

    def __init__(self, message: str) -> None:
        super().__init__(message)
        self.message = message


class DataNotEmpty(TransferError):
    """The database already holds shop data and the import was not asked to replace it."""


class InvalidData(TransferError):
    """A file or record does not have the tau-bench shape; the message names it."""


@dataclass
class TauData:
    """The three tau-bench objects: users, products and orders, each keyed by id."""

    users: dict[str, Json] = field(default_factory=dict)
    products: dict[str, Json] = field(default_factory=dict)
    orders: dict[str, Json] = field(default_factory=dict)


@dataclass(frozen=True)
class ImportSummary:
    customers: int
    payment_methods: int
    products: int
    variants: int
    orders: int
