"""Tools for delivered orders: request a return or an exchange (once per order)."""

from __future__ import annotations

from app.db.writes import WriteOutcome
from app.tools import order_actions as actions
from app.tools import summaries
from app.tools.orders import ItemIds, NewItemIds, OrderId, PaymentMethodId
from app.tools.render import order_outcome
from app.tools.results import Observation
from app.tools.scope import Runtime
from app.tools.spec import Confirm, ToolDeps, write_tool
from app.tools.writing import run_write


@write_tool(
    label="Requesting a return for {order} …",
    confirm=Confirm("Return items from order {order_id}", order=summaries.return_items),
    outcome=order_outcome,
)
async def return_delivered_order_items(
    deps: ToolDeps,
    order_id: OrderId,
    item_ids: ItemIds,
    payment_method_id: PaymentMethodId,
    runtime: Runtime,
) -> WriteOutcome | Observation:
    """Request a return of items of a delivered order; its status becomes 'return
    requested' and the customer receives return instructions by email.

    The refund goes to payment_method_id, which must be the order's original payment
    method or one of the customer's gift cards. A delivered order can be returned or
    exchanged only once, so collect every item first. Before calling, list the items
    and the refund method and get the customer's explicit yes. Returns the updated order.
    """
    return await run_write(
        deps.pool,
        runtime,
        tool_name="return_delivered_order_items",
        args={
            "order_id": order_id,
            "item_ids": item_ids,
            "payment_method_id": payment_method_id,
        },
        action_for=lambda c: actions.order_action(
            c, order_id, actions.request_return(item_ids, payment_method_id)
        ),
    )


@write_tool(
    label="Requesting an exchange for {order} …",
    confirm=Confirm("Exchange items in order {order_id}", order=summaries.exchange_items),
    outcome=order_outcome,
)
async def exchange_delivered_order_items(
    deps: ToolDeps,
    order_id: OrderId,
    item_ids: ItemIds,
    new_item_ids: NewItemIds,
    payment_method_id: PaymentMethodId,
    runtime: Runtime,
) -> WriteOutcome | Observation:
    """Request an exchange of items of a delivered order for other options of the same
    product; its status becomes 'exchange requested'.

    Look up the new item ids with get_product_details. The price difference will be
    charged to, or refunded to, payment_method_id; a gift card must hold enough to pay.
    A delivered order can be returned or exchanged only once, so collect every item
    first. Before calling, explain the exchange and the price difference and get the
    customer's explicit yes. Returns the updated order.
    """
    return await run_write(
        deps.pool,
        runtime,
        tool_name="exchange_delivered_order_items",
        args={
            "order_id": order_id,
            "item_ids": item_ids,
            "new_item_ids": new_item_ids,
            "payment_method_id": payment_method_id,
        },
        action_for=lambda c: actions.order_action(
            c, order_id, actions.request_exchange(item_ids, new_item_ids, payment_method_id)
        ),
    )


TOOLS = (return_delivered_order_items, exchange_delivered_order_items)
