"""The idempotency key of a write: the same call in the same turn of a thread is one write."""

from __future__ import annotations

import hashlib
from collections.abc import Mapping
from typing import Any

from app.jsontext import canonical_json


def idempotency_key(
    thread_id: str, turn_message_id: str, tool_name: str, args: Mapping[str, Any]
) -> str:
    """sha256 hex of the canonical JSON of the four parts."""
    payload = canonical_json(
        {"thread_id": thread_id, "turn": turn_message_id, "tool": tool_name, "args": dict(args)}
    )
    return hashlib.sha256(payload.encode()).hexdigest()
