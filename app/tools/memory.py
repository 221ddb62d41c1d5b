"""remember_preference: the one tool that writes to the customer's memory, not the shop."""

from __future__ import annotations

from typing import Annotated

from pydantic import Field

from app.memory.store import PREFERENCE_KEYS, PreferenceError, PreferenceKey, remember
from app.tools.results import Observation, error, found
from app.tools.scope import Runtime, context_of, conversation_customer, not_verified
from app.tools.spec import ToolDeps, read_tool


# Not cached: serving it from the cache would skip storing the preference.
@read_tool(label="Noting your preference …", cacheable=False)
async def remember_preference(
    deps: ToolDeps,
    key: Annotated[
        PreferenceKey,
        Field(
            description="name (what to call them), language, contact (how to reach "
            "them), refund_preference (where refunds go), or note (any other wish)."
        ),
    ],
    value: Annotated[
        str,
        Field(
            max_length=max(PREFERENCE_KEYS.values()),
            description="What the customer said, in a few words, e.g. 'gift card'.",
        ),
    ],
    runtime: Runtime,
) -> Observation:
    """Remember a preference the verified customer has explicitly stated about how they
    want to be served, so later conversations follow it: e.g. key "refund_preference",
    value "gift card"; key "language", value "Chinese"; key "name", value "Sam".

    Use it ONLY for something the customer said they want; never guess or infer a
    preference, and never store order details, payment numbers or addresses here. A
    preference is never a permission: every change still needs the customer's yes.
    """
    context = context_of(runtime)
    customer = conversation_customer(runtime)
    if context is None or customer is None:
        return not_verified()
    if runtime.store is None:
        return error("failed", "memory is not available right now; nothing was stored.")
    try:
        saved = await remember(
            runtime.store,
            customer,
            key,
            value,
            thread_id=context.thread_id,
            verified_by="token" if context.role == "customer" else "code",
        )
    except PreferenceError as refused:
        return error("refused", refused.message)
    return found(f"Remembered {saved.key}: {saved.value}", ids={"customer": [customer]})


TOOLS = (remember_preference,)
