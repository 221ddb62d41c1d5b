"""Every record read into the domain values first, so a bad record is refused with a
message naming it before anything is written."""

from __future__ import annotations

from collections.abc import Callable, Iterable
from dataclasses import dataclass
from decimal import Decimal
from typing import Any, NoReturn, cast

from app.db.transfer.data import ORDER_OPTIONAL, PAYMENT_SOURCES, InvalidData, Json, TauData
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
    customers = tuple(parse_user(k, v) for k, v in top_object(data.users, "users").items())
    products = tuple(parse_product(k, v) for k, v in top_object(data.products, "products").items())
    orders = tuple(parse_order(k, v) for k, v in top_object(data.orders, "orders").items())
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


def top_object(value: object, name: str) -> dict[str, object]:
    if not isinstance(value, dict):
        raise InvalidData(f"{name}.json: expected an object keyed by id, got {_kind(value)}")
    return value


def _refuse_duplicates(what: str, pairs: Iterable[tuple[str, str]]) -> None:
    seen: dict[str, str] = {}
    for key, holder in pairs:
        if key in seen:
            raise InvalidData(f"{what} {key!r} appears under both {seen[key]!r} and {holder!r}")
        seen[key] = holder
