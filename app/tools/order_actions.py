"""Write actions: lock what the rule reads, apply the domain rule, save, and give back the
changed order or customer as data (`order_view`, `customer_view`).

Each returns the callable `execute_write` runs inside its transaction.
"""

from __future__ import annotations

from collections.abc import Callable, Mapping
from typing import Any

from psycopg import AsyncConnection

from app.db.repository import ShopRepository
from app.db.writes import Result, WriteAction
from app.domain import customers as customer_rules
from app.domain.addresses import make_address
from app.domain.changes import OrderChange
from app.domain.errors import RuleViolation
from app.domain.handoff import handoff_summary
from app.domain.models import Customer, Order, Product
from app.tools.render import customer_view, order_view
from app.tools.scope import order_not_found, user_not_found

OrderRule = Callable[[Order, Customer, dict[str, Product]], OrderChange]
TRANSFER_SUCCESSFUL = "Transfer successful"


def order_action(
    customer_id: str | None, order_id: str, rule: OrderRule, *, products: bool = False
) -> WriteAction:
    """Lock the order and the customer's payment methods, apply `rule`, save the change.
    `products`: the rule reads the catalogue (item swaps); the others get none, two reads
    fewer in the write's transaction."""

    async def action(conn: AsyncConnection[Any]) -> Result:
        repo = ShopRepository(conn)
        order = await repo.get_order(order_id, for_update=True)
        if order is None or customer_id is None or order.customer_id != customer_id:
            raise RuleViolation(order_not_found(order_id))
        customer = await repo.get_customer(customer_id, for_update=True)
        if customer is None:
            raise RuleViolation(order_not_found(order_id))
        catalogue = (
            await repo.get_products(item.product_id for item in order.items) if products else {}
        )
        change = rule(order, customer, catalogue)
        await repo.save_order(order, change.order)
        await repo.apply_balance_deltas(customer_id, change.balance_deltas)
        return order_view(change.order)

    return action


def user_address_action(
    customer_id: str | None, user_id: str, fields: Mapping[str, str]
) -> WriteAction:
    async def action(conn: AsyncConnection[Any]) -> Result:
        repo = ShopRepository(conn)
        if customer_id is None or user_id != customer_id:
            raise RuleViolation(user_not_found(user_id))
        address = make_address(**fields)
        customer = await repo.get_customer(customer_id, for_update=True)
        if customer is None:
            raise RuleViolation(user_not_found(user_id))
        changed = customer_rules.modify_user_address(customer, address)
        await repo.update_customer_address(customer_id, changed.address)
        return customer_view(changed)

    return action


def handoff_action(customer_id: str | None, thread_id: str, summary: str) -> WriteAction:
    async def action(conn: AsyncConnection[Any]) -> Result:
        text = handoff_summary(summary)
        await ShopRepository(conn).insert_handoff_ticket(customer_id, thread_id, text)
        return TRANSFER_SUCCESSFUL

    return action
