"""Parametrised SQL for the shop's tables. Repositories never commit: the caller owns the
transaction (`execute_write` for writes, `app.tools.snapshot.read_snapshot` for reads)."""

from __future__ import annotations

from collections.abc import Iterable, Mapping
from decimal import Decimal
from typing import Any

from psycopg import AsyncConnection
from psycopg.types.json import Jsonb

from app.db import before_images
from app.domain.models import (
    Address,
    Customer,
    Fulfillment,
    Order,
    OrderItem,
    PaymentMethod,
    Product,
    Transaction,
    Variant,
)

Row = dict[str, Any]
_ADDRESS = "address1, address2, city, state, country, zip"

# The reads of a customer and of an order come in three variants, built here once: a plain
# read, a locking one, and a locking one that also returns the row as JSON for a write's
# before-image (app/db/before_images; see `_variant`). Keyed by (image column, lock).
_IMAGE = ", to_jsonb(t) - 'updated_at' AS image"
_VARIANTS = (("", ""), ("", " FOR UPDATE"), (_IMAGE, " FOR UPDATE"))
_CUSTOMER = {
    (image, lock): f"SELECT id, first_name, last_name, email, {_ADDRESS}{image}"
    f" FROM customers t WHERE id = %s{lock}"
    for image, lock in _VARIANTS
}
_PAYMENT_METHODS = {
    (image, lock): f"SELECT id, source, brand, last_four, balance{image} FROM payment_methods t"
    f" WHERE customer_id = %s ORDER BY position, id{lock}"
    for image, lock in _VARIANTS
}
_ORDER = {
    (image, lock): f"SELECT id, customer_id, {_ADDRESS}, status, cancel_reason, return_items,"
    " return_payment_method_id, exchange_items, exchange_new_items,"
    f" exchange_payment_method_id, exchange_price_difference{image}"
    f" FROM orders t WHERE id = %s{lock}"
    for image, lock in _VARIANTS
}
_ORDER_ITEMS = {
    image: f"SELECT product_id, item_id, name, price, options{image} FROM order_items t"
    " WHERE order_id = %s ORDER BY position"
    for image in ("", _IMAGE)
}
_FULFILLMENTS = {
    image: f"SELECT tracking_ids, item_ids{image} FROM fulfillments t"
    " WHERE order_id = %s ORDER BY position"
    for image in ("", _IMAGE)
}
_PAYMENTS = {
    image: f"SELECT transaction_type, amount, payment_method_id{image}"
    " FROM payment_transactions t WHERE order_id = %s ORDER BY position"
    for image in ("", _IMAGE)
}


class RepositoryError(RuntimeError):
    """The database did not hold what a write expected (a bug, not a rule violation)."""


class ShopRepository:
    def __init__(self, conn: AsyncConnection[Any]) -> None:
        self._conn = conn

    async def _all(self, sql: str, params: tuple[Any, ...] = ()) -> list[Row]:
        cursor = await self._conn.execute(sql, params)
        return list(await cursor.fetchall())

    async def _one(self, sql: str, params: tuple[Any, ...] = ()) -> Row | None:
        rows = await self._all(sql, params)
        return rows[0] if rows else None

    # --- customers ----------------------------------------------------------------------

    async def get_customer(self, customer_id: str, *, for_update: bool = False) -> Customer | None:
        """The customer; `for_update` also locks their payment methods (gift card balances)."""
        image, _ = variant = _variant(for_update)
        row = await self._one(_CUSTOMER[variant], (customer_id,))
        if row is None:
            return None
        methods = await self._all(_PAYMENT_METHODS[variant], (customer_id,))
        if image:
            before_images.keep(
                f"customer:{customer_id}",
                {"customers": [row["image"]], "payment_methods": [m["image"] for m in methods]},
            )
        orders = await self._all(
            "SELECT id FROM orders WHERE customer_id = %s ORDER BY position, id", (customer_id,)
        )
        return Customer(
            id=row["id"],
            first_name=row["first_name"],
            last_name=row["last_name"],
            email=row["email"],
            address=_address(row),
            payment_methods=tuple(
                PaymentMethod(
                    id=m["id"],
                    source=m["source"],
                    brand=m["brand"],
                    last_four=m["last_four"],
                    balance=m["balance"],
                )
                for m in methods
            ),
            order_ids=tuple(o["id"] for o in orders),
        )

    async def find_customer_ids_by_email(self, email: str) -> list[str]:
        rows = await self._all(
            "SELECT id FROM customers WHERE lower(email) = lower(%s) ORDER BY id LIMIT 2",
            (email.strip(),),
        )
        return [r["id"] for r in rows]

    async def find_customer_ids_by_name_zip(
        self, first_name: str, last_name: str, zip: str
    ) -> list[str]:
        rows = await self._all(
            "SELECT id FROM customers WHERE lower(first_name) = lower(%s)"
            " AND lower(last_name) = lower(%s) AND zip = %s ORDER BY id LIMIT 2",
            (first_name.strip(), last_name.strip(), zip.strip()),
        )
        return [r["id"] for r in rows]

    async def update_customer_address(self, customer_id: str, address: Address) -> None:
        cursor = await self._conn.execute(
            "UPDATE customers SET address1 = %s, address2 = %s, city = %s, state = %s,"
            " country = %s, zip = %s WHERE id = %s",
            (*_address_values(address), customer_id),
        )
        if cursor.rowcount != 1:
            raise RepositoryError(f"customer {customer_id} was not updated")

    async def apply_balance_deltas(self, customer_id: str, deltas: Mapping[str, Decimal]) -> None:
        """Move gift card balances; the table's CHECK keeps them from going negative."""
        for method_id, delta in sorted(deltas.items()):
            cursor = await self._conn.execute(
                "UPDATE payment_methods SET balance = balance + %s"
                " WHERE id = %s AND customer_id = %s AND source = 'gift_card'",
                (delta, method_id, customer_id),
            )
            if cursor.rowcount != 1:
                raise RepositoryError(f"gift card {method_id} was not updated")

    # --- orders -------------------------------------------------------------------------

    async def get_order(self, order_id: str, *, for_update: bool = False) -> Order | None:
        image, _ = variant = _variant(for_update)
        # All four are issued before any is read: in pipeline mode (read_snapshot) they go
        # in one round trip. The server runs them in order, so a FOR UPDATE holds the row
        # before its items are read, as when they went one by one.
        order = await self._conn.execute(_ORDER[variant], (order_id,))
        item_rows = await self._conn.execute(_ORDER_ITEMS[image], (order_id,))
        fulfillment_rows = await self._conn.execute(_FULFILLMENTS[image], (order_id,))
        payment_rows = await self._conn.execute(_PAYMENTS[image], (order_id,))
        row = await order.fetchone()
        items = await item_rows.fetchall()
        fulfillments = await fulfillment_rows.fetchall()
        payments = await payment_rows.fetchall()
        if row is None:
            return None
        if image:
            before_images.keep(
                f"order:{order_id}",
                {
                    "orders": [row["image"]],
                    "order_items": [i["image"] for i in items],
                    "fulfillments": [f["image"] for f in fulfillments],
                    "payment_transactions": [p["image"] for p in payments],
                },
            )
        return Order(
            id=row["id"],
            customer_id=row["customer_id"],
            address=_address(row),
            status=row["status"],
            items=tuple(
                OrderItem(i["product_id"], i["item_id"], i["name"], i["price"], i["options"])
                for i in items
            ),
            fulfillments=tuple(
                Fulfillment(tuple(f["tracking_ids"]), tuple(f["item_ids"])) for f in fulfillments
            ),
            payment_history=tuple(
                Transaction(p["transaction_type"], p["amount"], p["payment_method_id"])
                for p in payments
            ),
            cancel_reason=row["cancel_reason"],
            return_items=_tuple_or_none(row["return_items"]),
            return_payment_method_id=row["return_payment_method_id"],
            exchange_items=_tuple_or_none(row["exchange_items"]),
            exchange_new_items=_tuple_or_none(row["exchange_new_items"]),
            exchange_payment_method_id=row["exchange_payment_method_id"],
            exchange_price_difference=row["exchange_price_difference"],
        )

    async def save_order(self, before: Order, after: Order) -> None:
        """Write `after` over `before`: the order row, changed items, appended payments."""
        if after.payment_history[: len(before.payment_history)] != before.payment_history:
            raise RepositoryError(f"payment history of {after.id} may only be appended to")
        cursor = await self._conn.execute(
            "UPDATE orders SET address1 = %s, address2 = %s, city = %s, state = %s,"
            " country = %s, zip = %s, status = %s, cancel_reason = %s, return_items = %s,"
            " return_payment_method_id = %s, exchange_items = %s, exchange_new_items = %s,"
            " exchange_payment_method_id = %s, exchange_price_difference = %s,"
            " updated_at = now() WHERE id = %s",
            (
                *_address_values(after.address),
                after.status,
                after.cancel_reason,
                _jsonb_or_none(after.return_items),
                after.return_payment_method_id,
                _jsonb_or_none(after.exchange_items),
                _jsonb_or_none(after.exchange_new_items),
                after.exchange_payment_method_id,
                after.exchange_price_difference,
                after.id,
            ),
        )
        if cursor.rowcount != 1:
            raise RepositoryError(f"order {after.id} was not updated")
        if after.items != before.items:
            await self._replace_items(after.id, after.items)
        new_entries = after.payment_history[len(before.payment_history) :]
        if new_entries:
            await self._append_payments(after.id, new_entries)

    async def _replace_items(self, order_id: str, items: Iterable[OrderItem]) -> None:
        await self._conn.execute("DELETE FROM order_items WHERE order_id = %s", (order_id,))
        async with self._conn.cursor() as cursor:
            await cursor.executemany(
                "INSERT INTO order_items (order_id, position, product_id, item_id, name,"
                " price, options) VALUES (%s, %s, %s, %s, %s, %s, %s)",
                [
                    (order_id, i, it.product_id, it.item_id, it.name, it.price, Jsonb(it.options))
                    for i, it in enumerate(items)
                ],
            )

    async def _append_payments(self, order_id: str, entries: Iterable[Transaction]) -> None:
        row = await self._one(
            "SELECT coalesce(max(position) + 1, 0) AS next FROM payment_transactions"
            " WHERE order_id = %s",
            (order_id,),
        )
        start = row["next"] if row else 0
        async with self._conn.cursor() as cursor:
            await cursor.executemany(
                "INSERT INTO payment_transactions (order_id, position, transaction_type,"
                " amount, payment_method_id) VALUES (%s, %s, %s, %s, %s)",
                [
                    (order_id, start + i, t.transaction_type, t.amount, t.payment_method_id)
                    for i, t in enumerate(entries)
                ],
            )

    # --- products -----------------------------------------------------------------------

    async def get_products(self, product_ids: Iterable[str]) -> dict[str, Product]:
        ids = sorted(set(product_ids))
        if not ids:
            return {}
        products = await self._all(
            "SELECT id, name FROM products WHERE id = ANY(%s) ORDER BY id", (ids,)
        )
        variants = await self._all(
            "SELECT item_id, product_id, options, price, available FROM variants"
            " WHERE product_id = ANY(%s) ORDER BY product_id, position, item_id",
            (ids,),
        )
        return {
            p["id"]: Product(
                id=p["id"],
                name=p["name"],
                variants=tuple(
                    Variant(v["item_id"], v["product_id"], v["options"], v["price"], v["available"])
                    for v in variants
                    if v["product_id"] == p["id"]
                ),
            )
            for p in products
        }

    async def get_product(self, product_id: str) -> Product | None:
        return (await self.get_products([product_id])).get(product_id)

    async def list_product_types(self) -> dict[str, str]:
        """Product name -> product id, sorted by name."""
        rows = await self._all("SELECT id, name FROM products ORDER BY name, id")
        return {r["name"]: r["id"] for r in rows}

    # --- handoff ------------------------------------------------------------------------

    async def insert_handoff_ticket(
        self, customer_id: str | None, thread_id: str, summary: str
    ) -> int:
        row = await self._one(
            "INSERT INTO handoff_tickets (customer_id, thread_id, summary)"
            " VALUES (%s, %s, %s) RETURNING id",
            (customer_id, thread_id, summary),
        )
        if row is None:
            raise RepositoryError("handoff ticket was not inserted")
        return int(row["id"])


def _variant(for_update: bool) -> tuple[str, str]:
    """(image column, lock) of a read. The row as JSON beside its columns, for a write's
    before-image (app/db/before_images), only in a locking read while a write collects, so
    no other read pays for it."""
    if not for_update:
        return _VARIANTS[0]
    return _VARIANTS[2] if before_images.active() else _VARIANTS[1]


def _address(row: Row) -> Address:
    return Address(
        row["address1"], row["address2"], row["city"], row["state"], row["country"], row["zip"]
    )


def _address_values(a: Address) -> tuple[str, ...]:
    return (a.address1, a.address2, a.city, a.state, a.country, a.zip)


def _tuple_or_none(value: Any) -> tuple[str, ...] | None:
    return None if value is None else tuple(value)


def _jsonb_or_none(value: tuple[str, ...] | None) -> Jsonb | None:
    return None if value is None else Jsonb(list(value))
