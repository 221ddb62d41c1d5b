"""Load a validated shop with COPY, in one transaction."""

from __future__ import annotations

from collections.abc import Iterable, Sequence
from typing import Any

from psycopg import AsyncConnection, sql
from psycopg.rows import dict_row
from psycopg.types.json import Jsonb
from psycopg_pool import AsyncConnectionPool

from app.db.transfer.data import (
    ORDER_OPTIONAL,
    SHOP_TABLES,
    Connectable,
    DataNotEmpty,
    ImportSummary,
    TauData,
)
from app.db.transfer.validate import Shop, parse
from app.domain.models import Address

_EMPTY = f"TRUNCATE {SHOP_TABLES} CASCADE"


async def import_data(
    conn_or_pool: Connectable, data: TauData, *, replace: bool = False
) -> ImportSummary:
    """Load `data` in one transaction. Refuses a database holding shop data unless `replace`,
    which empties the shop tables first (same transaction, so a failed import changes nothing).
    """
    shop = parse(data)
    if isinstance(conn_or_pool, AsyncConnectionPool):
        async with conn_or_pool.connection() as conn:
            return await _load(conn, shop, replace=replace)
    return await _load(conn_or_pool, shop, replace=replace)


async def _load(conn: AsyncConnection[Any], shop: Shop, *, replace: bool) -> ImportSummary:
    async with conn.transaction():
        if replace:
            await conn.execute(_EMPTY)
        else:
            # Serialises concurrent imports: the second one waits, then sees the first's rows.
            await conn.execute("LOCK TABLE customers, products, orders IN SHARE ROW EXCLUSIVE MODE")
            await _refuse_non_empty(conn)
        for table, columns, rows in _rows(shop):
            await _copy(conn, table, columns, rows)
    return ImportSummary(
        customers=len(shop.customers),
        payment_methods=sum(len(c.payment_methods) for c in shop.customers),
        products=len(shop.products),
        variants=sum(len(p.variants) for p in shop.products),
        orders=len(shop.orders),
    )


async def _refuse_non_empty(conn: AsyncConnection[Any]) -> None:
    async with conn.cursor(row_factory=dict_row) as cur:
        await cur.execute(
            "SELECT (SELECT count(*) FROM customers) AS customers,"
            " (SELECT count(*) FROM products) AS products, (SELECT count(*) FROM orders) AS orders"
        )
        counts = await cur.fetchone() or {}
    if any(counts.values()):
        held = ", ".join(f"{n} {table}" for table, n in counts.items())
        raise DataNotEmpty(
            f"the database already holds shop data ({held}); pass --replace to empty it first"
        )


async def _copy(
    conn: AsyncConnection[Any], table: str, columns: Sequence[str], rows: Iterable[Sequence[Any]]
) -> None:
    async with (
        conn.cursor() as cur,
        cur.copy(
            sql.SQL("COPY {} ({}) FROM STDIN").format(
                sql.Identifier(table), sql.SQL(", ").join(map(sql.Identifier, columns))
            )
        ) as copy,
    ):
        for row in rows:
            await copy.write_row(row)


ADDRESS_COLUMNS = ("address1", "address2", "city", "state", "country", "zip")


def _addr(a: Address) -> tuple[str, ...]:
    return (a.address1, a.address2, a.city, a.state, a.country, a.zip)


def _json_or_none(value: Sequence[str] | None) -> Jsonb | None:
    return None if value is None else Jsonb(list(value))


def _rows(shop: Shop) -> Iterable[tuple[str, tuple[str, ...], Iterable[Sequence[Any]]]]:
    yield (
        "customers",
        ("id", "first_name", "last_name", "email", *ADDRESS_COLUMNS),
        ((c.id, c.first_name, c.last_name, c.email, *_addr(c.address)) for c in shop.customers),
    )
    yield (
        "payment_methods",
        ("id", "customer_id", "source", "brand", "last_four", "balance", "position"),
        (
            (m.id, c.id, m.source, m.brand, m.last_four, m.balance, i)
            for c in shop.customers
            for i, m in enumerate(c.payment_methods)
        ),
    )
    yield "products", ("id", "name"), ((p.id, p.name) for p in shop.products)
    yield (
        "variants",
        ("item_id", "product_id", "options", "price", "available", "position"),
        (
            (v.item_id, p.id, Jsonb(v.options), v.price, v.available, i)
            for p in shop.products
            for i, v in enumerate(p.variants)
        ),
    )
    yield (
        "orders",
        ("id", "customer_id", "position", *ADDRESS_COLUMNS, "status", *ORDER_OPTIONAL),
        (
            (
                o.id,
                o.customer_id,
                shop.order_position[o.id],
                *_addr(o.address),
                o.status,
                o.cancel_reason,
                _json_or_none(o.return_items),
                o.return_payment_method_id,
                _json_or_none(o.exchange_items),
                _json_or_none(o.exchange_new_items),
                o.exchange_payment_method_id,
                o.exchange_price_difference,
            )
            for o in shop.orders
        ),
    )
    yield (
        "order_items",
        ("order_id", "position", "product_id", "item_id", "name", "price", "options"),
        (
            (o.id, i, it.product_id, it.item_id, it.name, it.price, Jsonb(it.options))
            for o in shop.orders
            for i, it in enumerate(o.items)
        ),
    )
    yield (
        "fulfillments",
        ("order_id", "position", "tracking_ids", "item_ids"),
        (
            (o.id, i, Jsonb(list(f.tracking_ids)), Jsonb(list(f.item_ids)))
            for o in shop.orders
            for i, f in enumerate(o.fulfillments)
        ),
    )
    yield (
        "payment_transactions",
        ("order_id", "position", "transaction_type", "amount", "payment_method_id"),
        (
            (o.id, i, t.transaction_type, t.amount, t.payment_method_id)
            for o in shop.orders
            for i, t in enumerate(o.payment_history)
        ),
    )
