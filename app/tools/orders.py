"""Order tools: read an order, and change an order that has not shipped (status pending)."""

from __future__ import annotations

from typing import Annotated, Literal

from pydantic import Field

from app.db.repository import ShopRepository
from app.db.writes import WriteAction
from app.domain import pending_orders
from app.domain.addresses import make_address
from app.tools import summaries
from app.tools.identity import Address1, Address2, City, Country, State, Zip
from app.tools.order_actions import order_action
from app.tools.render import order_found, order_outcome, order_view
from app.tools.results import Observation, error
from app.tools.scope import (
    MAX_ID_CHARS,
    Runtime,
    conversation_customer,
    not_verified,
    order_not_found,
)
from app.tools.snapshot import read_snapshot
from app.tools.spec import Confirm, ToolDeps, read_tool, write_tool
from app.tools.writing import Session

MAX_ITEMS = 50

OrderId = Annotated[
    str,
    Field(
        max_length=MAX_ID_CHARS,
        description="The order id, such as '#W0000000'. Be careful: it starts with a '#'.",
    ),
]
ItemId = Annotated[str, Field(max_length=MAX_ID_CHARS)]
ItemIds = Annotated[
    list[ItemId],
    Field(
        max_length=MAX_ITEMS,
        description="The item ids to change, each such as '1008292230'. List an id twice "
        "to change two units of the same item.",
    ),
]
NewItemIds = Annotated[
    list[ItemId],
    Field(
        max_length=MAX_ITEMS,
        description="The new item ids, each such as '1008292230', in the same order as "
        "item_ids: each must be a different, available option of the same product as the "
        "item at the same position.",
    ),
]
PaymentMethodId = Annotated[
    str,
    Field(
        max_length=MAX_ID_CHARS,
        description="A payment method id of the customer, such as 'gift_card_0000000' or "
        "'credit_card_0000000', as listed by get_user_details.",
    ),
]
CancelReason = Literal["no longer needed", "ordered by mistake"]


@read_tool(label="Looking up {order} …")
async def get_order_details(deps: ToolDeps, order_id: OrderId, runtime: Runtime) -> Observation:
    """Get the status and details of one of the verified customer's orders: items with
    item ids, prices and options, shipping address, fulfillments and payment history."""
    customer_id = conversation_customer(runtime)
    if customer_id is None:
        return not_verified()
    async with read_snapshot(deps.pool) as conn:
        order = await ShopRepository(conn).get_order(order_id)
    if order is None or order.customer_id != customer_id:
        return error("not_found", order_not_found(order_id))
    return order_found(order_view(order))


@write_tool(
    label="Cancelling {order} …",
    confirm=Confirm("Cancel order {order_id}", order=summaries.cancel),
    outcome=order_outcome,
)
def cancel_pending_order(
    session: Session,
    order_id: OrderId,
    reason: Annotated[
        CancelReason,
        Field(description="Why: exactly 'no longer needed' or 'ordered by mistake'."),
    ],
) -> WriteAction:
    """Cancel a pending order. Processed or delivered orders cannot be cancelled.

    Before calling, explain the cancellation (which order, the refund) and get the
    customer's explicit yes. Every payment is refunded to the method it came from: a
    gift card gets its money back at once, other methods in 5-7 business days. Returns
    the updated order.
    """
    return order_action(
        session.customer_id,
        order_id,
        lambda order, customer, _: pending_orders.cancel_pending_order(order, customer, reason),
    )


@write_tool(
    label="Changing the address of {order} …",
    confirm=Confirm("Change the address of order {order_id}", order=summaries.order_address),
    outcome=order_outcome,
)
def modify_pending_order_address(
    session: Session,
    order_id: OrderId,
    address1: Address1,
    address2: Address2,
    city: City,
    state: State,
    country: Country,
    zip: Zip,
) -> WriteAction:
    """Change the shipping address of a pending order.

    For the customer's default (profile) address use modify_user_address instead. Before
    calling, tell the customer the full new address and get their explicit yes. Returns
    the updated order.
    """
    return order_action(
        session.customer_id,
        order_id,
        lambda order, _c, _p: pending_orders.modify_pending_order_address(
            order, make_address(address1, address2, city, state, country, zip)
        ),
    )


@write_tool(
    label="Changing items in {order} …",
    confirm=Confirm("Change items in order {order_id}", order=summaries.change_items),
    outcome=order_outcome,
)
def modify_pending_order_items(
    session: Session,
    order_id: OrderId,
    item_ids: ItemIds,
    new_item_ids: NewItemIds,
    payment_method_id: PaymentMethodId,
) -> WriteAction:
    """Swap items of a pending order for other options of the same product (for example
    another size or color). This can be done only once per order: afterwards its status
    is 'pending (item modified)' and no further change is possible, so collect every item
    to change first.

    Look up the new item ids with get_product_details. The price difference is charged
    to, or refunded to, payment_method_id; a gift card must hold enough to pay. Before
    calling, explain the changes and the price difference and get the customer's
    explicit yes. Returns the updated order.
    """
    return order_action(
        session.customer_id,
        order_id,
        lambda order, customer, products: pending_orders.modify_pending_order_items(
            order, customer, products, item_ids, new_item_ids, payment_method_id
        ),
        products=True,
    )


@write_tool(
    label="Changing the payment of {order} …",
    confirm=Confirm(
        "Change the payment method of order {order_id}", order=summaries.change_payment
    ),
    outcome=order_outcome,
)
def modify_pending_order_payment(
    session: Session, order_id: OrderId, payment_method_id: PaymentMethodId
) -> WriteAction:
    """Pay for a pending order with another of the customer's payment methods.

    The order must have a single payment; the new method is charged and the old one
    refunded (at once for a gift card, 5-7 business days otherwise). A gift card must
    hold the full amount. Before calling, explain the change and get the customer's
    explicit yes. Returns the updated order.
    """
    return order_action(
        session.customer_id,
        order_id,
        lambda order, customer, _: pending_orders.modify_pending_order_payment(
            order, customer, payment_method_id
        ),
    )


TOOLS = (
    get_order_details,
    cancel_pending_order,
    modify_pending_order_address,
    modify_pending_order_items,
    modify_pending_order_payment,
)
