"""remember_preference: the one tool that writes to the customer's memory, not the shop."""

from __future__ import annotations

from typing import Annotated

from langchain_core.tools import BaseTool
from pydantic import Field

from app.memory.store import PREFERENCE_KEYS, PreferenceError, PreferenceKey, remember
from app.tools.base import make_tool
from app.tools.scope import NOT_VERIFIED, Runtime, context_of, conversation_customer


def memory_tools() -> list[BaseTool]:
    async def remember_preference(
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
    ) -> str:
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
            return NOT_VERIFIED
        if runtime.store is None:
            return "Error: memory is not available right now; nothing was stored."
        try:
            saved = await remember(
                runtime.store,
                customer,
                key,
                value,
                thread_id=context.thread_id,
                verified_by="token" if context.role == "customer" else "code",
            )
        except PreferenceError as error:
            return f"Error: {error.message}"
        return f"Remembered {saved.key}: {saved.value}"

    return [make_tool("remember_preference", remember_preference)]
