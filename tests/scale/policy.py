"""The model of the scale test and benchmark: one write per conversation.

Each conversation asks for a human; the model hands it over (`transfer_to_human_agents`, a
write: one `tool_executions` row and one `handoff_tickets` row), then says so. The seed shop
has about 30 pending orders, too few for 200 cancellations, and a hand-over needs no order.
Stateless, so every conversation shares it (`python -m tests.fakellm --policy
tests.scale.policy:HandoffPolicy` serves it from its own process).
"""

from __future__ import annotations

from tests.fakellm import ChatRequest, Reply

ANSWER = (
    "I have passed your conversation to a human agent together with a short summary. "
    "Someone from our team will get back to you by email within one business day."
)


class HandoffPolicy:
    def __call__(self, request: ChatRequest) -> Reply:
        if request.pending_tool_results():
            return Reply.say(ANSWER)
        asked = request.last_user_text()[:200]
        return Reply.call("transfer_to_human_agents", summary=f"The customer asks: {asked}")
