"""JSON bytes through orjson, for what is encoded on every turn (model requests,
checkpoints), where the standard library's `json` costs ten to twenty times as much."""

from __future__ import annotations

from typing import Any

import orjson


def json_bytes(value: Any) -> bytes | None:
    """`value` as JSON bytes; None for what orjson refuses (a key that is not a string, an
    integer past 64 bits, an object it does not know), which the caller encodes its own way."""
    try:
        return orjson.dumps(value)
    except TypeError:
        return None
