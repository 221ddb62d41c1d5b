"""One-line, human summaries of pending writes, for the confirmation card: the machinery,
and the lines of the shop's writes (each write's `Confirm` names its own)."""

from __future__ import annotations

from collections.abc import Mapping, Sequence
from decimal import Decimal
from typing import Any

import structlog
from psycopg_pool import AsyncConnectionPool

from app.db.repository import ShopRepository
from app.domain import delivered_orders, pending_orders
from app.domain.addresses import make_address
from app.domain.errors import RuleViolation
from app.domain.models import Address, Customer, Order, Product, Transaction
from app.tools.scope import clip
from app.tools.snapshot import read_snapshot
from app.tools.spec import Confirm

log = structlog.get_logger(__name__)


async def summarize(
    pool: AsyncConnectionPool[Any],
    name: str,
    confirm: Confirm | None,
    customer_id: str | None,
    args: Mapping[str, Any],
) -> str:
    """E.g. "Cancel order #W5918442 (4 items, refund 1,463.70 to credit card ending 9212)".

    Never raises: anything unexpected (or another customer's order) gives the generic line.
    """
    line, _ = await assess(pool, name, confirm, customer_id, args)
    return line


async def assess(
    pool: AsyncConnectionPool[Any],
    name: str,
    confirm: Confirm | None,
    customer_id: str | None,
    args: Mapping[str, Any],
) -> tuple[str, str | None]:
    """(the card's line, the rule's refusal when the write's dry run on the order as it is
    now refuses it). Never raises."""
    if confirm is None:
        return f"Run {clip(str(name))}", None
    refusal: str | None = None
    try:
        detailed = await _detailed(pool, confirm, customer_id, args)
    except RuleViolation as refused:
        detailed, refusal = None, refused.message
    except (LookupError, TypeError, ValueError):
        detailed = None  # the write itself will be refused with a precise error
    except Exception:
        log.warning("write summary failed", tool=name, exc_info=True)
        detailed = None
    return detailed or generic(confirm, args), refusal


def generic(confirm: Confirm, args: Mapping[str, Any]) -> str:
    fields = {k: clip(str(args.get(k, "?"))) for k in ("order_id", "user_id")}
    return confirm.generic.format(**fields)


async def _detailed(
    pool: AsyncConnectionPool[Any],
    confirm: Confirm,
    customer_id: str | None,
    args: Mapping[str, Any],
) -> str | None:
    if confirm.args is not None:
        return confirm.args(args, customer_id)
    order_id = args.get("order_id")
    if confirm.order is None or customer_id is None or not isinstance(order_id, str):
        return None
    async with read_snapshot(pool) as conn:
        repo = ShopRepository(conn)
        order = await repo.get_order(order_id)
        customer = await repo.get_customer(customer_id)
        if order is None or customer is None or order.customer_id != customer_id:
            return None
        products = await repo.get_products(i.product_id for i in order.items)
    return confirm.order(args, order, customer, products)


# --- the lines of each write (its spec names them) ------------------------------------------


def cancel(
    args: Mapping[str, Any], order: Order, customer: Customer, _: Mapping[str, Product]
) -> str:
    change = pending_orders.cancel_pending_order(order, customer, args["reason"])
    refunds = change.order.payment_history[len(order.payment_history) :]
    return f"Cancel order {order.id} ({_count(order.items)}, {_refunds(refunds, customer)})"


def order_address(
    args: Mapping[str, Any], order: Order, _c: Customer, _p: Mapping[str, Product]
) -> str:
    return f"Change the address of order {order.id} to {_address_line(args)}"


def change_payment(
    args: Mapping[str, Any], order: Order, customer: Customer, _: Mapping[str, Product]
) -> str:
    method = _method(customer, str(args.get("payment_method_id", "")))
    change = pending_orders.modify_pending_order_payment(order, customer, args["payment_method_id"])
    paid = change.order.payment_history[-1]
    return (
        f"Pay for order {order.id} ({_money(paid.amount)}) with {method} instead of "
        f"{_method(customer, paid.payment_method_id)}"
    )


def change_items(
    args: Mapping[str, Any], order: Order, customer: Customer, products: Mapping[str, Product]
) -> str:
    method = _method(customer, str(args.get("payment_method_id", "")))
    item_ids: Sequence[str] = args["item_ids"]
    change = pending_orders.modify_pending_order_items(
        order, customer, products, item_ids, args["new_item_ids"], args["payment_method_id"]
    )
    entry = change.order.payment_history[-1]
    signed = entry.amount if entry.transaction_type == "payment" else -entry.amount
    names = _item_names(order, item_ids)
    return f"Change {_count(item_ids)} in order {order.id} ({names}; {_settle(signed, method)})"


def return_items(
    args: Mapping[str, Any], order: Order, customer: Customer, _: Mapping[str, Product]
) -> str:
    method = _method(customer, str(args.get("payment_method_id", "")))
    item_ids: Sequence[str] = args["item_ids"]
    delivered_orders.return_delivered_order_items(
        order, customer, item_ids, args["payment_method_id"]
    )
    total = _returned_total(order, item_ids)
    return (
        f"Return {_count(item_ids)} from order {order.id} ({_item_names(order, item_ids)}; "
        f"refund {_money(total)} to {method})"
    )


def exchange_items(
    args: Mapping[str, Any], order: Order, customer: Customer, products: Mapping[str, Product]
) -> str:
    method = _method(customer, str(args.get("payment_method_id", "")))
    item_ids: Sequence[str] = args["item_ids"]
    change = delivered_orders.exchange_delivered_order_items(
        order, customer, products, item_ids, args["new_item_ids"], args["payment_method_id"]
    )
    difference = change.order.exchange_price_difference or Decimal("0")
    names = _item_names(order, item_ids)
    return (
        f"Exchange {_count(item_ids)} in order {order.id} ({names}; {_settle(difference, method)})"
    )


def user_address(args: Mapping[str, Any], customer_id: str | None) -> str | None:
    if args.get("user_id") != customer_id:
        return None
    return f"Change the default address of user {customer_id} to {_address_line(args)}"


def handoff(args: Mapping[str, Any], _customer_id: str | None) -> str | None:
    summary = " ".join(str(args.get("summary", "")).split())
    return f"Transfer the conversation to a human agent: {clip(summary)}" if summary else None


# --- pieces -----------------------------------------------------------------------------------


def _count(items: Sequence[object]) -> str:
    return "1 item" if len(items) == 1 else f"{len(items)} items"


def _money(amount: Decimal) -> str:
    return f"{amount:,.2f}"


def _method(customer: Customer, method_id: str) -> str:
    method = customer.payment_method(method_id)
    if method is None:
        return clip(method_id)
    if method.source == "credit_card":
        return f"credit card ending {method.last_four}" if method.last_four else "credit card"
    if method.source == "gift_card":
        return f"gift card ending {method.id[-4:]}"
    return "PayPal"


def _refunds(refunds: Sequence[Transaction], customer: Customer) -> str:
    parts = [f"{_money(t.amount)} to {_method(customer, t.payment_method_id)}" for t in refunds]
    return "refund " + " and ".join(parts) if parts else "nothing to refund"


def _settle(difference: Decimal, method: str) -> str:
    if difference > 0:
        return f"charge {_money(difference)} to {method}"
    if difference < 0:
        return f"refund {_money(-difference)} to {method}"
    return "no price difference"


def _item_names(order: Order, item_ids: Sequence[str]) -> str:
    by_id = {i.item_id: i.name for i in order.items}
    return ", ".join(by_id.get(item_id, clip(item_id)) for item_id in item_ids)


def _returned_total(order: Order, item_ids: Sequence[str]) -> Decimal:
    remaining = list(order.items)
    total = Decimal("0")
    for item_id in item_ids:
        item = next(i for i in remaining if i.item_id == item_id)
        remaining.remove(item)
        total += item.price
    return total


def _address_line(args: Mapping[str, Any]) -> str:
    fields = ("address1", "address2", "city", "state", "country", "zip")
    a: Address = make_address(**{k: str(args.get(k, "")) for k in fields})
    street = ", ".join(p for p in (a.address1, a.address2) if p)
    return f"{street}, {a.city}, {a.state} {a.zip}, {a.country}"
