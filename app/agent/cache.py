"""A per-conversation cache of read-only tool results, kept in checkpointed state.

An entry is tagged with the ids its result's artifact names (an order, a customer, a payment
method). A write drops every entry that shares a tag with the write's ids, so a lookup after
a cancel sees the new status. Entries also age out after `tool_cache_max_age_turns`, because
the shop can change behind the conversation's back (a human agent, another channel). Only
a result its tool declares cacheable (app/tools/spec.py) is stored.
"""

from __future__ import annotations

from collections.abc import Iterable, Mapping
from typing import Any, TypedDict

from app.jsontext import canonical_json
from app.tools.results import Artifact

# Notes the agent appends to a tool result, in this order: served from the cache, then
# (from the repeat guard) seen before in this turn.
CACHED_NOTE = "\n(cached: same result as an earlier identical call in this conversation)"
REPEAT_HINT = "\n(Note: you already had this exact result earlier in this turn; do not ask again.)"
# Artifact id kinds as cache tags ("order:#W1", "user:sara_doe_496", "pm:gift_card_1").
TAG_PREFIX = {"order": "order", "customer": "user", "payment_method": "pm", "product": "product"}


class CacheEntry(TypedDict, total=False):
    content: str
    tags: list[str]
    turn: int
    artifact: Artifact


def cache_key(name: str, args: Mapping[str, Any]) -> str:
    return name + ":" + canonical_json(args)


def tags_of(ids: Mapping[str, Iterable[str]]) -> set[str]:
    """The cache tags of an artifact's ids."""
    return {
        f"{TAG_PREFIX[kind]}:{value}"
        for kind, values in ids.items()
        if kind in TAG_PREFIX
        for value in values
    }


def lookup(
    cache: Mapping[str, CacheEntry], name: str, args: Mapping[str, Any], turn: int, max_age: int
) -> CacheEntry | None:
    entry = cache.get(cache_key(name, args))
    if entry is None or turn - entry["turn"] >= max_age:
        return None
    return entry


def stored(
    cache: Mapping[str, CacheEntry],
    name: str,
    args: Mapping[str, Any],
    content: str,
    artifact: Artifact,
    turn: int,
) -> dict[str, CacheEntry]:
    out = dict(cache)
    kept = Artifact(**{k: v for k, v in artifact.items() if k != "cache"})  # type: ignore[typeddict-item]
    out[cache_key(name, args)] = CacheEntry(
        content=content,
        tags=sorted(tags_of(artifact.get("ids", {}))),
        turn=turn,
        artifact=kept,
    )
    return out


def invalidated(cache: Mapping[str, CacheEntry], write_tags: set[str]) -> dict[str, CacheEntry]:
    return {k: e for k, e in cache.items() if not write_tags.intersection(e["tags"])}
