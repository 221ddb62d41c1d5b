"""A per-conversation cache of read-only tool results, kept in checkpointed state.

An entry is tagged with what it shows (an order, a customer, a payment method). A write
drops every entry that shares a tag with it, so a lookup after a cancel sees the new status.
Entries also age out after `tool_cache_max_age_turns`, because the shop can change behind
the conversation's back (a human agent, another channel).
"""

from __future__ import annotations

import json
from collections.abc import Mapping
from typing import Any, TypedDict

# Tools with an effect beyond their result: the identity lookups write `verified_user_id`,
# remember_preference writes to the store. Serving them from a cache would skip the effect.
UNCACHEABLE = frozenset(
    {"find_user_id_by_email", "find_user_id_by_name_zip", "remember_preference"}
)
# Notes the agent appends to a tool result, in this order: served from the cache, then
# (from the repeat guard) seen before in this turn.
CACHED_NOTE = "\n(cached: same result as an earlier identical call in this conversation)"
REPEAT_HINT = "\n(Note: you already had this exact result earlier in this turn; do not ask again.)"


def without_notes(content: str) -> tuple[str, str]:
    """(the tool's own result, the notes the agent appended to it)."""
    notes = ""
    for note in (REPEAT_HINT, CACHED_NOTE):
        if content.endswith(note):
            content, notes = content.removesuffix(note), note + notes
    return content, notes


ID_FIELDS = {
    "order_id": "order",
    "user_id": "user",
    "payment_method_id": "pm",
    "product_id": "product",
}


class CacheEntry(TypedDict):
    content: str
    tags: list[str]
    turn: int


def cache_key(name: str, args: Mapping[str, Any]) -> str:
    return name + ":" + json.dumps(args, sort_keys=True, separators=(",", ":"), default=str)


def _id_pairs(value: Any) -> list[tuple[str, Any]]:
    """Every (id field, value) pair anywhere in a parsed JSON value. A loop, not a recursive
    generator: this runs on every tool result."""
    found: list[tuple[str, Any]] = []
    stack = [value]
    while stack:
        item = stack.pop()
        if isinstance(item, dict):
            for k, v in item.items():
                if k in ID_FIELDS:
                    found.append((k, v))
                if isinstance(v, dict | list):
                    stack.append(v)
        elif isinstance(item, list):
            stack.extend(v for v in item if isinstance(v, dict | list))
    return found


def tags_for(
    args: Mapping[str, Any], content: str = "", customer_id: str | None = None
) -> set[str]:
    """What a call (and its JSON result) is about: `order:#W…`, `user:…`, `pm:…`."""
    tags: set[str] = set()
    try:
        parsed: Any = json.loads(content) if content.startswith(("{", "[")) else None
    except ValueError:
        parsed = None
    pairs = [*args.items(), *_id_pairs(parsed)]
    if isinstance(parsed, dict) and isinstance(parsed.get("payment_methods"), dict):
        pairs += [("payment_method_id", pm) for pm in parsed["payment_methods"]]
    for key, value in pairs:
        prefix = ID_FIELDS.get(key)
        if prefix and isinstance(value, str | int):
            tags.add(f"{prefix}:{value}")
    if customer_id:
        tags.add(f"user:{customer_id}")
    return tags


def lookup(
    cache: Mapping[str, CacheEntry], name: str, args: Mapping[str, Any], turn: int, max_age: int
) -> str | None:
    if name in UNCACHEABLE:
        return None
    entry = cache.get(cache_key(name, args))
    if entry is None or turn - entry["turn"] >= max_age:
        return None
    return entry["content"]


def stored(
    cache: Mapping[str, CacheEntry], name: str, args: Mapping[str, Any], content: str, turn: int
) -> dict[str, CacheEntry]:
    out = dict(cache)
    if name not in UNCACHEABLE:
        out[cache_key(name, args)] = CacheEntry(
            content=content, tags=sorted(tags_for(args, content)), turn=turn
        )
    return out


def invalidated(cache: Mapping[str, CacheEntry], write_tags: set[str]) -> dict[str, CacheEntry]:
    return {k: e for k, e in cache.items() if not write_tags.intersection(e["tags"])}
