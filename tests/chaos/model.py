"""The soak's scripted model: what each kind of customer message gets, and model faults.

Stateless (every conversation shares it): the reply is read off the latest customer message,
whose tag says what the customer wants. `ChaosModel.fault` is set by the fault injector for
a while: then a share of the requests hang, drip, end early or get a 500.
"""

from __future__ import annotations

import random
import re
import threading
from dataclasses import replace

from app.actions.calls import OUTCOME_UNKNOWN
from tests.fakellm import ChatRequest, Latency, Reply, StreamFault, ToolResult
from tests.fakellm.policies import answer_order_status, summarise_tool_results

ORDER = re.compile(r"#W\d{7}")
STORY = (
    "Let me walk you through how our deliveries work, from the warehouse to your door, "
    "including how tracking updates appear, when a courier calls ahead, what happens "
    "when nobody is home, and how long a parcel waits at the depot before it comes back "
    "to us. Most parcels arrive within three to five business days."
)
STORY_PACE = Latency(ttft_ms=30, tokens_per_s=15)  # about four seconds: a cancel finds it
NOTED = "Noted. Is there anything else I can help you with?"
HANDED_OVER = "I have passed your conversation to a human agent, who will reply by email."
NOT_HANDED_OVER = "Sorry, I could not pass your conversation on. Please try again later."
MODEL_FAULTS = ("hang", "drip", "truncate", "http_500")
# The external writes (tests/chaos/actions.py): `[action] TOOL name=value ...` calls TOOL
# with those arguments (digits as numbers); its result is told as one of these.
ACTION = re.compile(r"^\[action\] (\w+)((?: \w+=\S+)*)")
DONE = "DONE"  # the server's answer came back: "DONE <tool>: <result>"
CHECKING = "A colleague will confirm whether that went through."  # the outcome is unknown
NOT_DONE = "NOT DONE"  # a failure the service reports: "NOT DONE <tool>: <why>"


class ChaosPolicy:
    def __call__(self, request: ChatRequest) -> Reply:
        text = request.last_user_text()
        results = request.pending_tool_results()
        if results:
            if results[-1].name == "get_order_details":
                return answer_order_status(request)
            if results[-1].name == "get_user_details":
                return account_summary(results[-1])
            if results[-1].name == "transfer_to_human_agents":
                return Reply.say(NOT_HANDED_OVER if results[-1].is_error else HANDED_OVER)
            action = ACTION.match(text)
            if action and results[-1].name == action.group(1):
                return Reply.say(action_told(results[-1]))
            return summarise_tool_results(request)
        order = ORDER.search(text)
        if text.startswith("[cancel]") and order:
            return Reply.call(
                "cancel_pending_order", order_id=order.group(0), reason="ordered by mistake"
            )
        if text.startswith("[order]") and order:
            return Reply.call("get_order_details", order_id=order.group(0))
        if text.startswith("[profile]"):
            return Reply.call("get_user_details", user_id=text.split()[1])
        if text.startswith("[handoff]"):
            return Reply.call("transfer_to_human_agents", summary="The customer asks for a human.")
        if text.startswith("[story]"):
            return Reply.say(STORY, latency=STORY_PACE)
        action = ACTION.match(text)
        if action:
            pairs = (p.split("=", 1) for p in action.group(2).split())
            args = {k: int(v) if v.isdigit() else v for k, v in pairs}
            return Reply.call(action.group(1), **args)
        return Reply.say(NOTED)


def action_told(result: ToolResult) -> str:
    """What the customer is told of an external write: done only when its result came."""
    if result.content == OUTCOME_UNKNOWN:
        return CHECKING
    if result.is_error or result.content.startswith("Declined:"):
        return f"{NOT_DONE} {result.name}: {result.content.removeprefix('Error:').strip()}"
    return f"{DONE} {result.name}: {result.content}"


def account_summary(result: ToolResult) -> Reply:
    """A short answer however many orders the account has (quoting them all, a long-lived
    soak's customers got answers longer than LLM_CALL_DEADLINE_S allows)."""
    data = result.json()
    if result.is_error or not isinstance(data, dict):
        return Reply.say(f"Sorry, I could not read your account. {result.content}")
    orders = data.get("orders") or []
    return Reply.say(
        f"Your account {data.get('user_id')} ({data.get('email')}) has {len(orders)} orders,"
        f" the latest {orders[-1] if orders else 'none'}."
    )


class ChaosModel:
    """`policy`'s replies, broken on purpose while `fault` is set (a `MODEL_FAULTS` name)."""

    def __init__(self, seed: int, share: float = 0.7) -> None:
        self.policy = ChaosPolicy()
        self.fault: str | None = None
        self.share = share
        self._random = random.Random(seed)
        self._lock = threading.Lock()  # called on the model server's own thread

    def __call__(self, request: ChatRequest) -> Reply:
        reply = self.policy(request)
        fault = self.fault
        with self._lock:
            hit = fault is not None and self._random.random() < self.share
        if not hit:
            return reply
        if fault == "http_500":
            return Reply.fail(500)
        if fault == "hang":
            return replace(reply, stream_fault=StreamFault.hang())
        if fault == "drip":
            return replace(reply, stream_fault=StreamFault.drip(every_s=0.5))
        return replace(reply, stream_fault=StreamFault.truncate())
