"""Policies that read the conversation instead of following a script.

`OrderLookupPolicy` is stateless, so any number of concurrent conversations can share it;
it is the default of `python -m tests.fakellm`.
"""

from __future__ import annotations

import re
from typing import Any

from tests.fakellm.types import ChatRequest, Reply, ToolResult

ORDER_ID = re.compile(r"#?\b(W\d{7})\b")
GREETING = "Hello! I can help with your orders. What is your order number?"
ASK_FOR_ORDER_ID = "Could you tell me your order number? It looks like #W1234567."


def find_order_id(text: str) -> str | None:
    match = ORDER_ID.search(text)
    return f"#{match.group(1)}" if match else None


def describe(value: Any) -> str:
    """A short human sentence fragment for a JSON tool result."""
    if isinstance(value, dict):
        return ", ".join(f"{k.replace('_', ' ')} {describe(v)}" for k, v in value.items())
    if isinstance(value, list):
        return "; ".join(describe(v) for v in value)
    return str(value)


def answer_order_status(request: ChatRequest) -> Reply:
    """After get_order_details: quote the order's status from the tool result."""
    results = request.pending_tool_results()
    if not results:
        raise ValueError("expected a tool result for get_order_details")
    result = results[-1]
    if result.is_error:
        return Reply.say(f"Sorry, I could not look that order up. {result.content}")
    data = result.json()
    if not isinstance(data, dict) or "status" not in data:
        return Reply.say(f"Here is what I found: {result.content}")
    order_id = data.get("order_id") or find_order_id(request.last_user_text()) or "your order"
    return Reply.say(
        f"Your order {order_id} is currently {data['status']}. "
        "Is there anything else I can help you with?"
    )


def summarise_tool_results(request: ChatRequest) -> Reply:
    """After any tool calls: one sentence per result, quoting its content."""
    results = request.pending_tool_results()
    if not results:
        raise ValueError("expected tool results")
    return Reply.say(" ".join(_sentence(r) for r in results))


def _sentence(result: ToolResult) -> str:
    label = result.name.replace("_", " ") or "the tool"
    if result.is_error:
        return f"{label} failed: {result.content.removeprefix('Error:').strip()}."
    data = result.json()
    return f"From {label}: {describe(data) if data is not None else result.content}."


class OrderLookupPolicy:
    """Greets, asks for an order number, looks it up, and answers with its status."""

    def __call__(self, request: ChatRequest) -> Reply:
        if request.pending_tool_results():
            return answer_order_status(request)
        text = request.last_user_text()
        order_id = find_order_id(text)
        if order_id is not None:
            return Reply.call("get_order_details", order_id=order_id)
        if re.search(r"\b(hi|hello|hey)\b", text, re.IGNORECASE):
            return Reply.say(GREETING)
        return Reply.say(ASK_FOR_ORDER_ID)
