"""The compose test's model: each conversation cancels the order its message names (a write
the customer confirms), then answers, slowly enough for a kill to find streams running.

Served by `python -m tests.fakellm --policy tests.compose.policy:CancelPolicy` on the host;
the containers reach it at host.containers.internal.
"""

from __future__ import annotations

import re

from tests.fakellm import ChatRequest, Reply

ANSWER = (
    "Your order is cancelled and the refund is on its way to the original payment method. "
    "It usually shows on your statement within five to seven business days. "
    "Is there anything else I can help you with today?"
)


class CancelPolicy:
    def __call__(self, request: ChatRequest) -> Reply:
        if request.pending_tool_results():
            return Reply.say(ANSWER)
        order = re.search(r"#W\d+", request.last_user_text())
        if order is None:
            return Reply.say("Which order would you like to cancel?")
        return Reply.call(
            "cancel_pending_order", order_id=order.group(0), reason="ordered by mistake"
        )
