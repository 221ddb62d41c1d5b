"""Per-customer memory: preferences the customer stated, in LangGraph's Postgres store.

One namespace per customer, so a customer's preferences can never be read for another.
"""

from __future__ import annotations

import re
from dataclasses import dataclass

from langgraph.store.base import BaseStore

KEY_RE = re.compile(r"^[a-z][a-z0-9_]{0,39}$")
MAX_VALUE_CHARS = 200
MAX_PREFERENCES = 20


class PreferenceError(ValueError):
    """A preference the store refuses; `message` is safe to show to the model."""

    def __init__(self, message: str) -> None:
        super().__init__(message)
        self.message = message


@dataclass(frozen=True)
class Preference:
    key: str
    value: str
    updated_at: str


def namespace(customer_id: str) -> tuple[str, str]:
    return ("memory", customer_id)


def normalise_key(key: str) -> str:
    return re.sub(r"[^a-z0-9]+", "_", key.strip().lower()).strip("_")


async def list_preferences(store: BaseStore, customer_id: str) -> list[Preference]:
    items = await store.asearch(namespace(customer_id), limit=MAX_PREFERENCES)
    return sorted(
        (
            Preference(
                key=i.key, value=str(i.value.get("value", "")), updated_at=i.updated_at.isoformat()
            )
            for i in items
        ),
        key=lambda p: p.key,
    )


async def remember(store: BaseStore, customer_id: str, key: str, value: str) -> Preference:
    clean = normalise_key(key)
    if not KEY_RE.fullmatch(clean):
        raise PreferenceError("the key must be a short name such as refund_method or language")
    text = " ".join(value.split())
    if not text or len(text) > MAX_VALUE_CHARS:
        raise PreferenceError(f"the value must be 1-{MAX_VALUE_CHARS} characters")
    existing = {p.key for p in await list_preferences(store, customer_id)}
    if clean not in existing and len(existing) >= MAX_PREFERENCES:
        raise PreferenceError(f"at most {MAX_PREFERENCES} preferences are kept; forget one first")
    await store.aput(namespace(customer_id), clean, {"value": text}, index=False)
    item = await store.aget(namespace(customer_id), clean)
    updated = item.updated_at.isoformat() if item else ""
    return Preference(key=clean, value=text, updated_at=updated)


async def forget(store: BaseStore, customer_id: str, key: str) -> bool:
    ns = namespace(customer_id)
    if await store.aget(ns, key) is None:
        return False
    await store.adelete(ns, key)
    return True


def preferences_prompt(preferences: list[Preference]) -> str:
    if not preferences:
        return ""
    lines = "\n".join(f"- {p.key}: {p.value}" for p in preferences)
    return (
        f"The customer's stated preferences (follow them unless they say otherwise now):\n{lines}"
    )
