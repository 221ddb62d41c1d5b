"""Ready-made model scripts for tests and benchmarks (tau-bench retail tool names)."""

from __future__ import annotations

from tests.fakellm import ChatRequest, Policy, Reply, Router, Script, ToolCall
from tests.fakellm.policies import answer_order_status, find_order_id, summarise_tool_results

ORDER_ID = "#W1234567"
PRODUCT_ID = "6086499569"
ORDER_QUESTION = f"where is my order {ORDER_ID}"
GREETING_TEXT = "Hello! How can I help you today?"
SHIPPING_QUESTION = "how much is shipping for 2 kg over 300 km?"


def order_lookup(order_id: str = ORDER_ID) -> Script:
    """get_order_details, then a streamed answer quoting the status from the tool result."""
    return Script([Reply.call("get_order_details", order_id=order_id), answer_order_status])


def greeting(text: str = GREETING_TEXT) -> Script:
    return Script([Reply.say(text)])


def two_parallel_reads(order_id: str = ORDER_ID, product_id: str = PRODUCT_ID) -> Script:
    """get_order_details and get_product_details in one message, then a summary of both."""
    return Script(
        [
            Reply.calls(
                ToolCall("get_order_details", {"order_id": order_id}),
                ToolCall("get_product_details", {"product_id": product_id}),
            ),
            summarise_tool_results,
        ]
    )


def shipping_estimate(distance_km: float = 300, weight_kg: float = 2) -> Script:
    return Script(
        [
            Reply.call("calc_shipping", distance_km=distance_km, weight_kg=weight_kg),
            summarise_tool_results,
        ]
    )


def scenario_for(request: ChatRequest) -> Policy:
    """Pick a script from a simulated customer's first message."""
    text = request.first_user_text()
    if "shipping" in text.lower():
        return shipping_estimate()
    order_id = find_order_id(text)
    if order_id is not None:
        return order_lookup(order_id)
    return greeting()


def customers() -> Router:
    """Many concurrent simulated customers, each following its own script.

    Give each customer a distinct first message (e.g. its own order id, or a
    "[customer 17]" suffix); serve with `python -m tests.fakellm --policy
    tests.fakes.scenarios:customers`.
    """
    return Router(scenario_for)
