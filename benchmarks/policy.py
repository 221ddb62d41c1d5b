"""The scripted model's policy for the benchmark: the order-lookup turn, for any number of
concurrent conversations (stateless), with the SAME answer for our service and the peer.

`tests.fakellm.policies.OrderLookupPolicy` quotes the status only from a JSON tool result;
our service shows the model a rewritten `field: value` view of tool results, so that policy
would answer ours with the whole observation (~80 tokens) and the peer in ~15. Here the
status is read from either form, so both stream the same ~15-token answer.

    python -m tests.fakellm --policy benchmarks.policy:OrderLookup
"""

from __future__ import annotations

import re

from tests.fakellm.policies import OrderLookupPolicy
from tests.fakellm.types import ChatRequest, Reply

STATUSES = (
    "pending (item modified)",
    "exchange requested",
    "return requested",
    "processed",
    "delivered",
    "cancelled",
    "exchanged",
    "returned",
    "pending",
)
_STATUS = re.compile("|".join(re.escape(s) for s in STATUSES))
_ORDER = re.compile(r"#W\d{7}")
# What the service's summariser (a request without tools) gets back when a long thread is
# folded: a few short lines, like a real model's summary.
SUMMARY = (
    "The verified customer asked several times for the status of their order.\n"
    "Each time the order was looked up with get_order_details and its status was reported.\n"
    "Nothing was changed; nothing is pending."
)


def answer(order_id: str, status: str) -> str:
    return (
        f"Your order {order_id} is currently {status}. Is there anything else I can help you with?"
    )


class OrderLookup:
    """First call: get_order_details for the order in the user's message; after the
    result: one sentence with the order's status, whatever the result's format."""

    def __init__(self) -> None:
        self._first = OrderLookupPolicy()

    def __call__(self, request: ChatRequest) -> Reply:
        if not request.tools:
            return Reply.say(SUMMARY)
        results = request.pending_tool_results()
        if not results:
            return self._first(request)
        result = results[-1]
        if result.is_error:
            return Reply.say("Sorry, I could not look that order up. Could you check the number?")
        data = result.json()
        text = result.content
        status = data.get("status") if isinstance(data, dict) else None
        if not isinstance(status, str):
            found = _STATUS.search(text)
            status = found.group(0) if found else "being processed"
        ids = _ORDER.findall(text) or _ORDER.findall(request.last_user_text())
        return Reply.say(answer(ids[0] if ids else "your order", status))


class LookupOrCancel(OrderLookup):
    """OrderLookup, and a confirmed write for "cancel <order>": first call
    cancel_pending_order for the order in the message; after its result, one sentence.
    (benchmarks/roundtrips.py's write turn: post, paused for confirmation, resume.)"""

    def __call__(self, request: ChatRequest) -> Reply:
        text = request.last_user_text()
        if request.tools and "cancel" in text.lower():
            if request.pending_tool_results():
                return Reply.say("Done: the order is cancelled and the payment refunded.")
            ids = _ORDER.findall(text)
            if ids:
                return Reply.call(
                    "cancel_pending_order", order_id=ids[0], reason="no longer needed"
                )
        return super().__call__(request)


LONG_ANSWER = " ".join(f"word{i}" for i in range(120))


class LongAnswer:
    """Any request: a 120-word answer (at 20 tokens/s, six seconds of streaming), so a run is
    still streaming when a cancel reaches it (benchmarks/cross_replica.py)."""

    def __call__(self, request: ChatRequest) -> Reply:
        return Reply.say(LONG_ANSWER)
