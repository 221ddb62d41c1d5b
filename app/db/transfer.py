"""Import and export the shop's data in the tau-bench retail layout.

A folder holds `users.json`, `products.json` and `orders.json`, each one JSON object keyed by id.
Import reads every record into the domain values first, so a bad record is refused with a
message naming it before anything is written; then it loads all rows with COPY in one
transaction. Export reads one snapshot and rebuilds the same three objects.
"""

from __future__ import annotations

import json
import os
from collections.abc import Callable, Iterable, Sequence
from dataclasses import dataclass, field
from decimal import Decimal
from pathlib import Path
from typing import Any, NoReturn, cast, get_args

from psycopg import AsyncConnection, sql
from psycopg.rows import dict_row
from psycopg.types.json import Jsonb
from psycopg_pool import AsyncConnectionPool

from app.domain.models import (
    ORDER_STATUSES,
    Address,
    Customer,
    Fulfillment,
    Order,
    OrderItem,
    PaymentMethod,
    PaymentSource,
    Product,
    Transaction,
    Variant,
    money,
)

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


# ---------------------------------------------------------------------------- reading records


def _kind(value: object) -> str:
    if value is None:
        return "null"
    if isinstance(value, bool):
        return "a boolean"
    if isinstance(value, int | float | Decimal):
        return "a number"
    if isinstance(value, str):
        return "a string"
    if isinstance(value, list):
        return "a list"
    return "an object" if isinstance(value, dict) else type(value).__name__


class _Record:
    """One JSON object being read, with the path used to name it in error messages."""

    def __init__(self, value: object, where: str) -> None:
        if not isinstance(value, dict):
            raise InvalidData(f"{where}: expected an object, got {_kind(value)}")
        self.raw: Json = value
        self.where = where

    def fail(self, message: str) -> NoReturn:
        raise InvalidData(f"{self.where}: {message}")

    def check_keys(self, required: Iterable[str], optional: Iterable[str] = ()) -> None:
        required = tuple(required)
        missing = [k for k in required if k not in self.raw]
        if missing:
            self.fail(f"missing field {', '.join(repr(k) for k in missing)}")
        unknown = sorted(set(self.raw) - set(required) - set(optional))
        if unknown:
            self.fail(f"unknown field {', '.join(repr(k) for k in unknown)}")

    def _get(self, key: str, check: Callable[[object], bool], want: str) -> Any:
        value = self.raw.get(key)
        if not check(value):
            self.fail(f"field {key!r} must be {want}, got {_kind(value)}")
        return value

    def text(self, key: str) -> str:
        return cast(str, self._get(key, lambda v: isinstance(v, str), "a string"))

    def opt_text(self, key: str) -> str | None:
        return None if self.raw.get(key) is None else self.text(key)

    def flag(self, key: str) -> bool:
        return cast(bool, self._get(key, lambda v: isinstance(v, bool), "true or false"))

    def amount(self, key: str) -> Decimal:
        value = self._get(key, _is_number, "a number")
        result = money(value)
        if not result.is_finite():
            self.fail(f"field {key!r} must be a finite number")
        return result

    def opt_amount(self, key: str) -> Decimal | None:
        return None if self.raw.get(key) is None else self.amount(key)

    def obj(self, key: str) -> _Record:
        return _Record(self._get(key, lambda v: isinstance(v, dict), "an object"), self.at(key))

    def items(self, key: str) -> list[object]:
        return cast(list[object], self._get(key, lambda v: isinstance(v, list), "a list"))

    def texts(self, key: str) -> tuple[str, ...]:
        values = self.items(key)
        if not all(isinstance(v, str) for v in values):
            self.fail(f"field {key!r} must be a list of strings")
        return tuple(cast(list[str], values))

    def opt_texts(self, key: str) -> tuple[str, ...] | None:
        return None if self.raw.get(key) is None else self.texts(key)

    def at(self, key: str | int) -> str:
        return f"{self.where}[{key}]" if isinstance(key, int) else f"{self.where} › {key}"


def _is_number(value: object) -> bool:
    return isinstance(value, int | float | Decimal) and not isinstance(value, bool)


def _address(rec: _Record) -> Address:
    rec.check_keys(("address1", "city", "country", "state", "zip"), ("address2",))
    return Address(
        address1=rec.text("address1"),
        address2=rec.opt_text("address2") or "",
        city=rec.text("city"),
        state=rec.text("state"),
        country=rec.text("country"),
        zip=rec.text("zip"),
    )


def _matching_id(rec: _Record, key: str, expected: str) -> str:
    value = rec.text(key)
    if value != expected:
        rec.fail(f"{key} {value!r} does not match its key {expected!r}")
    return value


def parse_user(user_id: str, raw: object) -> Customer:
    rec = _Record(raw, f"users.json › {user_id!r}")
    rec.check_keys(("name", "address", "email", "payment_methods", "orders"))
    name = rec.obj("name")
    name.check_keys(("first_name", "last_name"))
    methods = rec.obj("payment_methods")
    return Customer(
        id=user_id,
        first_name=name.text("first_name"),
        last_name=name.text("last_name"),
        email=rec.text("email"),
        address=_address(rec.obj("address")),
        payment_methods=tuple(
            _payment_method(_Record(value, methods.at(repr(key))), key)
            for key, value in methods.raw.items()
        ),
        order_ids=rec.texts("orders"),
    )


def _payment_method(rec: _Record, method_id: str) -> PaymentMethod:
    rec.check_keys(("source", "id"), ("brand", "last_four", "balance"))
    source = rec.text("source")
    if source not in PAYMENT_SOURCES:
        rec.fail(f"source must be one of {', '.join(PAYMENT_SOURCES)}, got {source!r}")
    balance = rec.opt_amount("balance")
    if source == "gift_card" and balance is None:
        rec.fail("a gift card needs a balance")
    if balance is not None and balance < 0:
        rec.fail("balance must not be negative")
    return PaymentMethod(
        id=_matching_id(rec, "id", method_id),
        source=cast(PaymentSource, source),
        brand=rec.opt_text("brand"),
        last_four=rec.opt_text("last_four"),
        balance=balance,
    )


def parse_product(product_id: str, raw: object) -> Product:
    rec = _Record(raw, f"products.json › {product_id!r}")
    rec.check_keys(("name", "product_id", "variants"))
    _matching_id(rec, "product_id", product_id)
    variants = rec.obj("variants")
    parsed = []
    for item_id, value in variants.raw.items():
        var = _Record(value, variants.at(repr(item_id)))
        var.check_keys(("item_id", "options", "available", "price"))
        price = var.amount("price")
        if price < 0:
            var.fail("price must not be negative")
        parsed.append(
            Variant(
                item_id=_matching_id(var, "item_id", item_id),
                product_id=product_id,
                options=var.obj("options").raw,
                price=price,
                available=var.flag("available"),
            )
        )
    return Product(id=product_id, name=rec.text("name"), variants=tuple(parsed))


def parse_order(order_id: str, raw: object) -> Order:
    rec = _Record(raw, f"orders.json › {order_id!r}")
    rec.check_keys(
        ("order_id", "user_id", "address", "items", "fulfillments", "status", "payment_history"),
        ORDER_OPTIONAL,
    )
    _matching_id(rec, "order_id", order_id)
    status = rec.text("status")
    if status not in ORDER_STATUSES:
        rec.fail(f"status must be one of {', '.join(ORDER_STATUSES)}, got {status!r}")
    return Order(
        id=order_id,
        customer_id=rec.text("user_id"),
        address=_address(rec.obj("address")),
        status=status,
        items=tuple(_order_item(_Record(v, rec.at(f"items[{i}]"))) for i, v in _enum(rec, "items")),
        fulfillments=tuple(
            _fulfillment(_Record(v, rec.at(f"fulfillments[{i}]")))
            for i, v in _enum(rec, "fulfillments")
        ),
        payment_history=tuple(
            _transaction(_Record(v, rec.at(f"payment_history[{i}]")))
            for i, v in _enum(rec, "payment_history")
        ),
        cancel_reason=rec.opt_text("cancel_reason"),
        return_items=rec.opt_texts("return_items"),
        return_payment_method_id=rec.opt_text("return_payment_method_id"),
        exchange_items=rec.opt_texts("exchange_items"),
        exchange_new_items=rec.opt_texts("exchange_new_items"),
        exchange_payment_method_id=rec.opt_text("exchange_payment_method_id"),
        exchange_price_difference=rec.opt_amount("exchange_price_difference"),
    )


def _enum(rec: _Record, key: str) -> Iterable[tuple[int, object]]:
    return enumerate(rec.items(key))


def _order_item(rec: _Record) -> OrderItem:
    rec.check_keys(("name", "product_id", "item_id", "price", "options"))
    return OrderItem(
        product_id=rec.text("product_id"),
        item_id=rec.text("item_id"),
        name=rec.text("name"),
        price=rec.amount("price"),
        options=rec.obj("options").raw,
    )


def _fulfillment(rec: _Record) -> Fulfillment:
    rec.check_keys(("tracking_id", "item_ids"))
    return Fulfillment(tracking_ids=rec.texts("tracking_id"), item_ids=rec.texts("item_ids"))


def _transaction(rec: _Record) -> Transaction:
    rec.check_keys(("transaction_type", "amount", "payment_method_id"))
    kind = rec.text("transaction_type")
    if kind not in ("payment", "refund"):
        rec.fail(f"transaction_type must be payment or refund, got {kind!r}")
    amount = rec.amount("amount")
    if amount < 0:
        rec.fail("amount must not be negative")
    return Transaction(
        transaction_type="payment" if kind == "payment" else "refund",
        amount=amount,
        payment_method_id=rec.text("payment_method_id"),
    )


@dataclass(frozen=True)
class Shop:
    """Validated data, ready to load: every cross-reference checked."""

    customers: tuple[Customer, ...]
    products: tuple[Product, ...]
    orders: tuple[Order, ...]
    order_position: dict[str, int]


def parse(data: TauData) -> Shop:
    """Read and cross-check all three objects; raise `InvalidData` naming the first bad record."""
    customers = tuple(parse_user(k, v) for k, v in _top(data.users, "users").items())
    products = tuple(parse_product(k, v) for k, v in _top(data.products, "products").items())
    orders = tuple(parse_order(k, v) for k, v in _top(data.orders, "orders").items())
    _refuse_duplicates(
        "payment method", ((m.id, c.id) for c in customers for m in c.payment_methods)
    )
    _refuse_duplicates("variant item_id", ((v.item_id, p.id) for p in products for v in p.variants))

    owner = {o.id: o.customer_id for o in orders}
    position: dict[str, int] = {}
    for c in customers:
        for i, order_id in enumerate(c.order_ids):
            where = f"users.json › {c.id!r} › orders"
            if order_id in position:
                raise InvalidData(f"{where}: order {order_id!r} is listed twice")
            if order_id not in owner:
                raise InvalidData(f"{where}: order {order_id!r} is not in orders.json")
            if owner[order_id] != c.id:
                raise InvalidData(f"{where}: order {order_id!r} belongs to {owner[order_id]!r}")
            position[order_id] = i
    known = {c.id for c in customers}
    for o in orders:
        where = f"orders.json › {o.id!r}"
        if o.customer_id not in known:
            raise InvalidData(f"{where}: user {o.customer_id!r} is not in users.json")
        if o.id not in position:
            raise InvalidData(f"{where}: not listed in the orders of user {o.customer_id!r}")
    return Shop(customers, products, orders, position)


def _top(value: object, name: str) -> dict[str, object]:
    if not isinstance(value, dict):
        raise InvalidData(f"{name}.json: expected an object keyed by id, got {_kind(value)}")
    return value


def _refuse_duplicates(what: str, pairs: Iterable[tuple[str, str]]) -> None:
    seen: dict[str, str] = {}
    for key, holder in pairs:
        if key in seen:
            raise InvalidData(f"{what} {key!r} appears under both {seen[key]!r} and {holder!r}")
        seen[key] = holder


# ---------------------------------------------------------------------------- loading


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
            await conn.execute(f"TRUNCATE {SHOP_TABLES} CASCADE")
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


# ---------------------------------------------------------------------------- export


async def export_data(pool: AsyncConnectionPool[Any]) -> TauData:
    """Read the shop tables from one consistent snapshot. Money comes back as `Decimal`."""
    async with pool.connection() as conn, conn.transaction():
        await conn.execute("SET TRANSACTION ISOLATION LEVEL REPEATABLE READ, READ ONLY")

        async def rows(sql: str) -> list[Json]:
            async with conn.cursor(row_factory=dict_row) as cur:
                await cur.execute(sql)
                return cast(list[Json], await cur.fetchall())

        customers = await rows("SELECT * FROM customers ORDER BY id")
        methods = await rows("SELECT * FROM payment_methods ORDER BY customer_id, position, id")
        products = await rows("SELECT * FROM products ORDER BY id")
        variants = await rows("SELECT * FROM variants ORDER BY product_id, position, item_id")
        orders = await rows("SELECT * FROM orders ORDER BY id")
        items = await rows("SELECT * FROM order_items ORDER BY order_id, position")
        fulfillments = await rows("SELECT * FROM fulfillments ORDER BY order_id, position")
        payments = await rows("SELECT * FROM payment_transactions ORDER BY order_id, position")

    data = TauData()
    for c in customers:
        data.users[c["id"]] = {
            "name": {"first_name": c["first_name"], "last_name": c["last_name"]},
            "address": _address_json(c),
            "email": c["email"],
            "payment_methods": {},
            "orders": [],
        }
    for m in methods:
        method: Json = {"source": m["source"]}
        for key in ("brand", "last_four", "balance"):
            if m[key] is not None:
                method[key] = m[key]
        method["id"] = m["id"]
        data.users[m["customer_id"]]["payment_methods"][m["id"]] = method
    for p in products:
        data.products[p["id"]] = {"name": p["name"], "product_id": p["id"], "variants": {}}
    for v in variants:
        data.products[v["product_id"]]["variants"][v["item_id"]] = {
            "item_id": v["item_id"],
            "options": v["options"],
            "available": v["available"],
            "price": v["price"],
        }
    for o in sorted(orders, key=lambda o: (o["customer_id"], o["position"], o["id"])):
        data.users[o["customer_id"]]["orders"].append(o["id"])
    for o in orders:
        order: Json = {
            "order_id": o["id"],
            "user_id": o["customer_id"],
            "address": _address_json(o),
            "items": [],
            "fulfillments": [],
            "status": o["status"],
            "payment_history": [],
        }
        order.update({k: o[k] for k in ORDER_OPTIONAL if o[k] is not None})
        data.orders[o["id"]] = order
    for it in items:
        data.orders[it["order_id"]]["items"].append(
            {k: it[k] for k in ("name", "product_id", "item_id", "price", "options")}
        )
    for f in fulfillments:
        data.orders[f["order_id"]]["fulfillments"].append(
            {"tracking_id": f["tracking_ids"], "item_ids": f["item_ids"]}
        )
    for t in payments:
        data.orders[t["order_id"]]["payment_history"].append(
            {k: t[k] for k in ("transaction_type", "amount", "payment_method_id")}
        )
    return data


def _address_json(row: Json) -> Json:
    return {k: row[k] for k in ("address1", "address2", "city", "country", "state", "zip")}


# ---------------------------------------------------------------------------- files


def read_dir(path: str | os.PathLike[str]) -> TauData:
    """Read the three files; numbers become `Decimal` so money keeps its cents exactly."""
    folder = Path(path)
    loaded: dict[str, dict[str, Json]] = {}
    for name in FILES:
        file = folder / f"{name}.json"
        try:
            value = json.loads(file.read_text(encoding="utf-8"), parse_float=Decimal)
        except FileNotFoundError:
            raise InvalidData(f"{file}: file not found") from None
        except UnicodeDecodeError:
            raise InvalidData(f"{file}: not UTF-8 text") from None
        except json.JSONDecodeError as e:
            raise InvalidData(
                f"{file}: not valid JSON ({e.msg} at line {e.lineno}, column {e.colno})"
            ) from None
        loaded[name] = cast(dict[str, Json], _top(value, name))
    return TauData(users=loaded["users"], products=loaded["products"], orders=loaded["orders"])


def write_dir(data: TauData, path: str | os.PathLike[str]) -> None:
    """Write the three files (each replaced atomically). Money is written as a JSON number."""
    folder = Path(path)
    folder.mkdir(parents=True, exist_ok=True)
    for name, value in (
        ("users", data.users),
        ("products", data.products),
        ("orders", data.orders),
    ):
        target = folder / f"{name}.json"
        tmp = target.with_suffix(".json.tmp")
        tmp.write_text(dumps(value) + "\n", encoding="utf-8")
        tmp.replace(target)


def dumps(value: object) -> str:
    return json.dumps(value, indent=2, ensure_ascii=False, default=_number)


def _number(value: object) -> float:
    # tau-bench writes every amount as a float (247.0); a float holds any cent amount exactly
    # enough to print it back as written.
    if isinstance(value, Decimal):
        return float(money(value))
    raise TypeError(f"{type(value).__name__} is not JSON serialisable")


async def import_dir(
    pool: Connectable, path: str | os.PathLike[str], *, replace: bool = False
) -> ImportSummary:
    return await import_data(pool, read_dir(path), replace=replace)


async def export_dir(pool: AsyncConnectionPool[Any], path: str | os.PathLike[str]) -> TauData:
    data = await export_data(pool)
    write_dir(data, path)
    return data
