"""Tools for delivered orders: request a return or an exchange (once per order)."""

from __future__ import annotations

from app.db.writes import WriteAction
from app.domain import delivered_orders
from app.tools import summaries
from app.tools.order_actions import order_action
from app.tools.orders import ItemIds, NewItemIds, OrderId, PaymentMethodId
from app.tools.render import order_outcome
from app.tools.spec import Confirm, write_tool
from app.tools.writing import Session


@write_tool(
    label="Requesting a return for {order} …",
    confirm=Confirm("Return items from order {order_id}", order=summaries.return_items),
    outcome=order_outcome,
)
def return_delivered_order_items(
    session: Session, order_id: OrderId, item_ids: ItemIds, payment_method_id: PaymentMethodId
) -> WriteAction:
    """Request a return of items of a delivered order; its status becomes 'return
    requested' and the customer receives return instructions by email.

    The refund goes to payment_method_id, which must be the order's original payment
    method or one of the customer's gift cards. A delivered order can be returned or
    exchanged only once, so collect every item first. Before calling, list the items
    and the refund method and get the customer's explicit yes. Returns the updated order.
    """
    return order_action(
        session.customer_id,
        order_id,
        lambda order, customer, _: delivered_orders.return_delivered_order_items(
            order, customer, item_ids, payment_method_id
        ),
    )


@write_tool(
    label="Requesting an exchange for {order} …",
    confirm=Confirm("Exchange items in order {order_id}", order=summaries.exchange_items),
    outcome=order_outcome,
)
def exchange_delivered_order_items(
    session: Session,
    order_id: OrderId,
    item_ids: ItemIds,
    new_item_ids: NewItemIds,
    payment_method_id: PaymentMethodId,
) -> WriteAction:
    """Request an exchange of items of a delivered order for other options of the same
    product; its status becomes 'exchange requested'.

    Look up the new item ids with get_product_details. The price difference will be
    charged to, or refunded to, payment_method_id; a gift card must hold enough to pay.
    A delivered order can be returned or exchanged only once, so collect every item
    first. Before calling, explain the exchange and the price difference and get the
    customer's explicit yes. Returns the updated order.
    """
    return order_action(
        session.customer_id,
        order_id,
        lambda order, customer, products: delivered_orders.exchange_delivered_order_items(
            order, customer, products, item_ids, new_item_ids, payment_method_id
        ),
        products=True,
    )


TOOLS = (return_delivered_order_items, exchange_delivered_order_items)
