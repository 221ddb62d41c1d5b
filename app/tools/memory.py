"""remember_preference: the one tool that writes to the customer's memory, not the shop."""

from __future__ import annotations

from langchain_core.tools import BaseTool

from app.memory.store import PreferenceError, remember
from app.tools.base import make_tool
from app.tools.scope import NOT_VERIFIED, Runtime, conversation_customer


def memory_tools() -> list[BaseTool]:
    async def remember_preference(key: str, value: str, runtime: Runtime) -> str:
        """Remember a preference the customer has explicitly stated about how they want to be
        served, so later conversations follow it: e.g. key "refund_method", value "gift card";
        key "language", value "Chinese"; key "name", value "Sam".

        Use it ONLY for something the customer said they want; never guess or infer a
        preference, and never store order details, payment numbers or addresses here. It
        needs no confirmation. `key` is a short snake_case name; `value` at most 200
        characters.
        """
        customer = conversation_customer(runtime)
        if customer is None:
            return NOT_VERIFIED
        if runtime.store is None:
            return "Error: memory is not available right now; nothing was stored."
        try:
            saved = await remember(runtime.store, customer, key, value)
        except PreferenceError as error:
            return f"Error: {error.message}"
        return f"Remembered {saved.key}: {saved.value}"

    return [make_tool("remember_preference", remember_preference)]
