"""A thread's metadata: what a client tags it with, stored and searched as the official
server does, with `graph_id` and `assistant_id` the server's own (always in a thread's
metadata, never stored, never changed by a client)."""

from __future__ import annotations

from typing import Any

from app.api.lg.errors import refuse
from app.api.lg.views import THREAD_METADATA
from app.jsonbytes import json_bytes

MAX_METADATA_BYTES = 16_384


def stored_part(metadata: dict[str, Any] | None) -> dict[str, Any]:
    """The client's keys, to store: the assistant's keys go (they are added on every
    read); another graph or assistant is refused, and so is a body too large to keep."""
    metadata = metadata or {}
    for key, ours in THREAD_METADATA.items():
        if key in metadata and metadata[key] != ours:
            refuse(
                f"a thread's {key} is the one assistant's ({ours}) and cannot be set",
                "metadata_reserved",
            )
    kept = {k: v for k, v in metadata.items() if k not in THREAD_METADATA}
    if len(json_bytes(kept) or b"") > MAX_METADATA_BYTES:
        refuse(
            f"thread metadata is limited to {MAX_METADATA_BYTES} bytes of JSON",
            "metadata_too_large",
        )
    return kept


def search_filter(metadata: dict[str, Any] | None) -> dict[str, Any] | None:
    """The stored part of a metadata filter; None when it names another graph or
    assistant, which no thread here has."""
    metadata = metadata or {}
    if any(metadata[k] != v for k, v in THREAD_METADATA.items() if k in metadata):
        return None
    return {k: v for k, v in metadata.items() if k not in THREAD_METADATA}


def contains(value: Any, wanted: Any) -> bool:
    """Postgres' jsonb `@>`, which the official server filters `values` with: an object
    contains the keys asked for with contained values, an array contains each element
    asked for somewhere in it, anything else is equal."""
    if isinstance(wanted, dict):
        return isinstance(value, dict) and all(
            k in value and contains(value[k], v) for k, v in wanted.items()
        )
    if isinstance(wanted, list):
        if not isinstance(value, list):
            return False
        return all(any(contains(item, w) for item in value) for w in wanted)
    if isinstance(value, list):  # a scalar is contained in an array holding it
        return any(item == wanted for item in value)
    if isinstance(value, bool) or isinstance(wanted, bool):  # jsonb: true is not 1
        return value is wanted
    return bool(value == wanted)
